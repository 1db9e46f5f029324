import TokenWire

/// An AWS credential source (`environment_id` `aws1`), as google-auth's `aws.py` reads it.
///
/// The region comes from `AWS_REGION` or `AWS_DEFAULT_REGION`, else from `region_url` (an
/// availability zone, less its last letter); the keys from `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, else from the instance's role at `url`. When
/// `imdsv2_session_token_url` is given and instance metadata is asked, a session token is asked
/// for first (IMDSv2). The subject token is a signed `GetCallerIdentity` request
/// (``AWSRequestSigner``) for `regional_cred_verification_url`.
struct AWSSource: Sendable, Hashable {
    var regionURL: FederationURL?
    var url: FederationURL?
    var verificationURL: FederationURL
    var sessionTokenURL: FederationURL?

    /// The seconds an IMDSv2 session token is asked for.
    static let sessionTokenSeconds = 300

    init(fields: CredentialsFile.Fields, file: String) throws(ConfigurationError) {
        func refuse(_ text: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(file): credential_source \(text)")
        }
        let environment = try fields.string("environment_id") ?? ""
        guard environment == "aws1" else {
            if environment.hasPrefix("aws") {
                throw refuse(
                    "environment_id \(EndpointSecurity.printable(environment)): this version of the AWS source is not "
                        + "supported, only aws1"
                )
            }
            throw refuse("environment_id \(EndpointSecurity.printable(environment)) is not aws1")
        }
        func url(_ name: String, _ rule: FederationURL.Rule) throws(ConfigurationError) -> FederationURL? {
            guard let text = try fields.string(name), !text.isEmpty else { return nil }
            return try FederationURL(text, field: "credential_source.\(name)", file: file, rule: rule)
        }
        regionURL = try url("region_url", .instanceMetadata)
        self.url = try url("url", .instanceMetadata)
        sessionTokenURL = try url("imdsv2_session_token_url", .instanceMetadata)
        guard let verification = try url("regional_cred_verification_url", .verification) else {
            throw refuse("lacks regional_cred_verification_url")
        }
        verificationURL = verification
    }

    /// The signed `GetCallerIdentity` request, as the subject token.
    func subjectToken(
        audience: String,
        environment: [String: String],
        http: FederationHTTP,
        now: Int64
    ) async throws(CredentialsError) -> String {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        var region = value("AWS_REGION") ?? value("AWS_DEFAULT_REGION")
        // The region is put into the verification URL's host (`sts.{region}.amazonaws.com`) and
        // the signature's scope: a name of AWS's form only, whatever the environment says.
        if let region, !Self.isRegion(region) {
            let name = value("AWS_REGION") != nil ? "AWS_REGION" : "AWS_DEFAULT_REGION"
            throw CredentialsError(
                .credentials,
                "aws: \(name) \(EndpointSecurity.printable(region)) is not a region name (lower-case letters, "
                    + "digits and hyphens, as us-east-1)"
            )
        }
        var keys: AWSRequestSigner.Keys?
        if let id = value("AWS_ACCESS_KEY_ID"), let secret = value("AWS_SECRET_ACCESS_KEY") {
            keys = AWSRequestSigner.Keys(
                accessKeyID: id,
                secretAccessKey: secret,
                sessionToken: value("AWS_SESSION_TOKEN")
            )
        }
        if region == nil, regionURL == nil {
            throw CredentialsError(
                .credentials,
                "aws: no region: set AWS_REGION (or AWS_DEFAULT_REGION) or give credential_source.region_url"
            )
        }
        if keys == nil, url == nil {
            throw CredentialsError(
                .credentials,
                "aws: no keys: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or give credential_source.url"
            )
        }
        var headers: [(String, String)] = []
        // Only when instance metadata is asked (as google-auth): keys and region from the
        // environment need no session.
        if let sessionTokenURL, region == nil || keys == nil {
            let reply = try await http.call(
                .PUT,
                sessionTokenURL.url(),
                headers: [("X-aws-ec2-metadata-token-ttl-seconds", "\(Self.sessionTokenSeconds)")],
                what: "aws imdsv2_session_token_url \(sessionTokenURL)"
            )
            let token = String(decoding: reply, as: UTF8.self).trimmingWhitespaceAndNewlines()
            guard !token.isEmpty, token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw CredentialsError(.transient, "aws imdsv2_session_token_url \(sessionTokenURL): no session token")
            }
            headers.append(("X-aws-ec2-metadata-token", token))
        }
        if region == nil, let regionURL {
            let zone = String(
                decoding: try await http.call(
                    .GET,
                    regionURL.url(),
                    headers: headers,
                    what: "aws region_url \(regionURL)"
                ),
                as: UTF8.self
            )
            .trimmingWhitespaceAndNewlines()
            let name = String(zone.dropLast())
            guard Self.isRegion(name) else {
                // Shown only when short: a region_url that answers something else (a role's
                // credentials, say) must not have it repeated.
                let shown =
                    zone.utf8.count <= Self.longestRegion + 8
                    ? EndpointSecurity.printable(zone) : "a reply of \(zone.utf8.count) bytes"
                throw CredentialsError(
                    .transient,
                    "aws region_url \(regionURL): \(shown) is not an availability zone"
                )
            }
            region = name
        }
        if keys == nil, let url {
            let role = String(
                decoding: try await http.call(.GET, url.url(), headers: headers, what: "aws url \(url)"),
                as: UTF8.self
            )
            .trimmingWhitespaceAndNewlines()
            guard !role.isEmpty else {
                throw CredentialsError(.transient, "aws url \(url): no role name (does the instance have a role?)")
            }
            // The name becomes a segment of the next URL's path and of messages: an IAM name
            // only (never `..`, `?`, `%`, or a document the wrong URL answered with).
            guard Self.isRoleName(role) else {
                throw CredentialsError(
                    .transient,
                    "aws url \(url): the reply (\(role.utf8.count) bytes) is not an IAM role name (1 to "
                        + "\(Self.longestRoleName) of A-Z a-z 0-9 + = , . @ _ -, not . or ..)"
                )
            }
            let body = try await http.call(
                .GET,
                url.appendingPath(role),
                headers: headers,
                what: "aws url \(url)/\(role)"
            )
            keys = try Self.keys(body, from: "aws url \(url)/\(role)")
        }
        let signed = AWSRequestSigner.sign(
            url: verificationURL,
            region: region!,
            keys: keys!,
            date: now,
            unsignedHeaders: [("x-goog-cloud-target-resource", audience)]
        )
        return signed.subjectToken
    }

    /// The longest region name taken (AWS's own are under 20 characters).
    static let longestRegion = 32
    /// The longest IAM role name.
    static let longestRoleName = 64

    /// Whether `name` is a region's: 1 to ``longestRegion`` lower-case letters, digits and
    /// hyphens, a letter or digit at each end.
    static func isRegion(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        func alphanumeric(_ byte: UInt8) -> Bool { (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) }
        guard let first = bytes.first, let last = bytes.last, bytes.count <= longestRegion else { return false }
        return alphanumeric(first) && alphanumeric(last) && bytes.allSatisfy { alphanumeric($0) || $0 == 0x2D }
    }

    /// Whether `name` is an IAM role's: 1 to ``longestRoleName`` of `A-Z a-z 0-9 + = , . @ _ -`,
    /// and not `.` or `..` (which a URL's path would resolve).
    static func isRoleName(_ name: String) -> Bool {
        guard (1...longestRoleName).contains(name.utf8.count), name != ".", name != ".." else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                || "+=,.@_-".utf8.contains(byte)
        }
    }

    /// The keys in an instance role's credentials (`AccessKeyId`, `SecretAccessKey`, `Token`).
    static func keys(_ body: [UInt8], from what: String) throws(CredentialsError) -> AWSRequestSigner.Keys {
        guard let object = try? StrictJSON.object(bytes: body) else {
            throw CredentialsError(.transient, "\(what): not a JSON object")
        }
        func text(_ name: String) -> String? {
            if case .string(let value)? = object[name], !value.isEmpty,
                value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
            {
                return value
            }
            return nil
        }
        guard let id = text("AccessKeyId"), let secret = text("SecretAccessKey") else {
            throw CredentialsError(.transient, "\(what): no AccessKeyId and SecretAccessKey")
        }
        return AWSRequestSigner.Keys(accessKeyID: id, secretAccessKey: secret, sessionToken: text("Token"))
    }
}
