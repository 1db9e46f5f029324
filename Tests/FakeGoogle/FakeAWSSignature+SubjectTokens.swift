import Crypto
import Foundation

/// Subject tokens of `aws4_request` type: made for tests, and verified by the fake STS.
extension FakeAWSSignature {
    // MARK: Subject tokens

    /// The `Authorization` header's parts: `AWS4-HMAC-SHA256 Credential=AKID/date/region/service/aws4_request,
    /// SignedHeaders=a;b, Signature=hex` (the separators `,` or `, `).
    struct Authorization {
        var accessKeyID: String
        var date: String
        var region: String
        var service: String
        var signedHeaders: [String]
        var signature: String

        init?(_ header: String) {
            guard header.hasPrefix(FakeAWSSignature.algorithm + " ") else { return nil }
            var fields: [String: String] = [:]
            for field in header.dropFirst(FakeAWSSignature.algorithm.count + 1).split(separator: ",") {
                let parts = field.trimmingCharacters(in: .whitespaces)
                    .split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, fields[String(parts[0])] == nil else { return nil }
                fields[String(parts[0])] = String(parts[1])
            }
            guard fields.count == 3, let credential = fields["Credential"], let signed = fields["SignedHeaders"],
                let signature = fields["Signature"]
            else { return nil }
            let scope = credential.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
            guard scope.count == 5, scope[4] == "aws4_request", !scope[0].isEmpty else { return nil }
            accessKeyID = scope[0]
            date = scope[1]
            region = scope[2]
            service = scope[3]
            signedHeaders = signed.split(separator: ";", omittingEmptySubsequences: false).map(String.init)
            self.signature = signature
        }
    }

    /// A `urn:ietf:params:aws:token-type:aws4_request` subject token as google-auth's `aws.py`
    /// makes it: a `GetCallerIdentity` request to `sts.<region>.amazonaws.com` signed with
    /// `credentials` at `date`, with `x-goog-cloud-target-resource: audience` added (signed only
    /// when `signTargetResource`: google-auth adds it after signing), serialized as JSON
    /// `{"headers":[{"key","value"}...],"method":"POST","url"}` and percent-encoded.
    public static func subjectToken(
        credentials: FakeAWSCredentials,
        region: String,
        audience: String,
        date: Date = Date(),
        signTargetResource: Bool = false
    ) -> String {
        let host = "sts.\(region).amazonaws.com"
        let url = "https://\(host)?Action=GetCallerIdentity&Version=2011-06-15"
        let amzDate = Self.amzDate(date)
        var headers: [(name: String, value: String)] = [("host", host), ("x-amz-date", amzDate)]
        if let token = credentials.sessionToken { headers.append(("x-amz-security-token", token)) }
        if signTargetResource { headers.append(("x-goog-cloud-target-resource", audience)) }
        let signed = headers.map(\.name).sorted()
        let signature =
            Self.signature(
                secretAccessKey: credentials.secretAccessKey,
                amzDate: amzDate,
                region: region,
                service: "sts",
                method: "POST",
                path: "/",
                query: "Action=GetCallerIdentity&Version=2011-06-15",
                headers: headers,
                signedHeaders: signed
            ) ?? ""
        let scope = credentialScope(date: String(amzDate.prefix(8)), region: region, service: "sts")
        let authorization =
            "\(algorithm) Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signed.joined(separator: ";")), "
            + "Signature=\(signature)"
        var all = [("Authorization", authorization)] + headers
        if !signTargetResource { all.append(("x-goog-cloud-target-resource", audience)) }
        let json = FakeJSON.encode([
            "url": url, "method": "POST", "headers": all.map { ["key": $0.0, "value": $0.1] },
        ])
        return uriEncode(String(decoding: json, as: UTF8.self), keepingSlash: true)
    }

    /// Why an `aws4_request` subject token was refused: the token is not a signed request
    /// (`invalidRequest`), AWS would refuse the request (`aws`: its error code and message), or
    /// it is not meant for this audience (`targetResource`).
    enum Refusal: Error, Equatable {
        case invalidRequest(String)
        case aws(code: String, message: String)
        case targetResource(String)

        var description: String {
            switch self {
            case .invalidRequest(let message), .targetResource(let message): message
            case .aws(let code, let message):
                "Received invalid AWS response of type \(code) with error message: \(message)"
            }
        }
    }

    /// What a verified subject token holds.
    struct Verified {
        var accessKeyID: String
        var region: String
        var signedHeaders: [String]
    }

    /// How far from now an `X-Amz-Date` may be, seconds.
    static let allowedClockSkew: TimeInterval = 15 * 60

    /// Verifies an `aws4_request` subject token (as the form carried it: the percent-encoded JSON
    /// of a signed request) for `audience`: a `POST` of `GetCallerIdentity` to
    /// `https://sts.<region>.amazonaws.com` whose `host` header is the URL's host, signed by a key
    /// `credentials(accessKeyID)` knows for service `sts` in that region at an `x-amz-date` within
    /// 15 minutes of `now`, its session token (when the key has one) sent and signed, and
    /// `x-goog-cloud-target-resource` the audience (signed or not, with or without `https:`).
    static func verify(
        subjectToken: String,
        audience: String,
        now: Date,
        credentials: (String) -> FakeAWSCredentials?
    ) -> Result<Verified, Refusal> {
        let malformed = Refusal.invalidRequest("The subject token is not a valid serialized AWS signed request.")
        guard let json = subjectToken.removingPercentEncoding, let object = FakeJSON.object(Array(json.utf8)),
            let url = object["url"] as? String, let method = object["method"] as? String,
            let list = object["headers"] as? [[String: Any]]
        else { return .failure(malformed) }
        var headers: [(name: String, value: String)] = []
        var byName: [String: String] = [:]
        for entry in list {
            guard let key = entry["key"] as? String, let value = entry["value"] as? String,
                byName[key.lowercased()] == nil
            else { return .failure(malformed) }
            headers.append((key, value))
            byName[key.lowercased()] = value
        }
        guard method == "POST" else {
            return .failure(.invalidRequest("The AWS signed request must be a POST, not \(method)."))
        }
        guard let target = byName["x-goog-cloud-target-resource"],
            target == audience || target == "https:" + audience
        else {
            return .failure(
                .targetResource(
                    "The x-goog-cloud-target-resource header [\(byName["x-goog-cloud-target-resource"] ?? "")] "
                        + "does not match the audience [\(audience)]."
                )
            )
        }
        guard let components = URLComponents(string: url), components.scheme == "https", components.port == nil,
            let host = components.host?.lowercased(), host.hasPrefix("sts."), host.hasSuffix(".amazonaws.com")
        else {
            return .failure(.invalidRequest("The AWS signed request's URL [\(url)] is not a regional AWS STS URL."))
        }
        let hostRegion = String(host.dropFirst("sts.".count).dropLast(".amazonaws.com".count))
        guard !hostRegion.isEmpty, !hostRegion.contains(".") else {
            return .failure(.invalidRequest("The AWS signed request's URL [\(url)] is not a regional AWS STS URL."))
        }
        let query = components.percentEncodedQuery ?? ""
        let canonicalQuery = Self.canonicalQuery(query)
        guard canonicalQuery == "Action=GetCallerIdentity&Version=2011-06-15" else {
            return .failure(.invalidRequest("The AWS signed request must call GetCallerIdentity (Version 2011-06-15)."))
        }
        guard byName["host"]?.lowercased() == host else {
            return .failure(.aws(code: "SignatureDoesNotMatch", message: "The host header does not match the URL."))
        }
        guard let header = byName["authorization"], let authorization = Authorization(header) else {
            return .failure(
                .aws(
                    code: "IncompleteSignature",
                    message: "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters."
                )
            )
        }
        let signed = authorization.signedHeaders
        guard signed == signed.map({ $0.lowercased() }).sorted(), Set(signed).count == signed.count,
            signed.contains("host"), signed.contains("x-amz-date")
        else {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "SignedHeaders must be lower-case, sorted, and include host and x-amz-date."
                )
            )
        }
        guard authorization.service == "sts" else {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "Credential should be scoped to correct service: 'sts'."
                )
            )
        }
        guard authorization.region == hostRegion else {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "Credential should be scoped to a valid region, not '\(authorization.region)'."
                )
            )
        }
        guard let amzDate = byName["x-amz-date"], let date = Self.date(amzDate: amzDate) else {
            return .failure(.aws(code: "IncompleteSignature", message: "Missing or malformed x-amz-date."))
        }
        guard authorization.date == String(amzDate.prefix(8)) else {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP."
                )
            )
        }
        if date < now.addingTimeInterval(-allowedClockSkew) {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "Signature expired: \(amzDate) is now earlier than "
                        + "\(Self.amzDate(now.addingTimeInterval(-allowedClockSkew))) "
                        + "(\(Self.amzDate(now)) - 15 min.)"
                )
            )
        }
        if date > now.addingTimeInterval(allowedClockSkew) {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "Signature not yet current: \(amzDate) is still later than "
                        + "\(Self.amzDate(now.addingTimeInterval(allowedClockSkew))) "
                        + "(\(Self.amzDate(now)) + 15 min.)"
                )
            )
        }
        let invalidToken = Refusal.aws(
            code: "InvalidClientTokenId",
            message: "The security token included in the request is invalid."
        )
        guard let key = credentials(authorization.accessKeyID) else { return .failure(invalidToken) }
        if let sessionToken = key.sessionToken {
            guard byName["x-amz-security-token"] == sessionToken, signed.contains("x-amz-security-token") else {
                return .failure(invalidToken)
            }
        } else if byName["x-amz-security-token"] != nil {
            return .failure(invalidToken)
        }
        let expected = signature(
            secretAccessKey: key.secretAccessKey,
            amzDate: amzDate,
            region: authorization.region,
            service: authorization.service,
            method: method,
            path: components.percentEncodedPath,
            query: query,
            headers: headers,
            signedHeaders: signed
        )
        guard let expected, constantTimeEqual(expected, authorization.signature) else {
            return .failure(
                .aws(
                    code: "SignatureDoesNotMatch",
                    message: "The request signature we calculated does not match the signature you provided. "
                        + "Check your AWS Secret Access Key and signing method. "
                        + "Consult the service documentation for details."
                )
            )
        }
        return .success(Verified(accessKeyID: key.accessKeyID, region: hostRegion, signedHeaders: signed))
    }
}
