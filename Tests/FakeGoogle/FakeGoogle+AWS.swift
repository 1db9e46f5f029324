import Foundation

extension FakeGoogle {
    /// The instance role a fake's AWS metadata service names.
    public static let awsDefaultRoleName = "fleet-agent-role"
    static let awsMetadataPrefix = "/latest/"
    static let awsTokenPath = "/latest/api/token"
    static let awsZonePath = "/latest/meta-data/placement/availability-zone"
    static let awsRegionPath = "/latest/meta-data/placement/region"
    static let awsCredentialsPath = "/latest/meta-data/iam/security-credentials"
    /// The longest IMDSv2 session token lifetime, seconds (6 hours).
    static let awsMaxSessionTTL = 21600

    // MARK: Addresses

    /// The role and credentials path (`url` of an `aws1` credential source).
    public var awsMetadataURL: String { "http://\(urlHost):\(port)\(Self.awsCredentialsPath)" }
    /// The availability zone path (`region_url`).
    public var awsRegionURL: String { "http://\(urlHost):\(port)\(Self.awsZonePath)" }
    /// The IMDSv2 session token path (`imdsv2_session_token_url`).
    public var awsSessionTokenURL: String { "http://\(urlHost):\(port)\(Self.awsTokenPath)" }

    // MARK: Configuration

    /// The instance's availability zone (`us-east-1b` by default).
    public var awsAvailabilityZone: String { state.withLock { $0.federation.awsAvailabilityZone } }
    /// The instance's region: its availability zone without the zone's letter.
    public var awsRegion: String { String(awsAvailabilityZone.dropLast()) }
    /// Puts the instance in zone `a` of `region` (`eu-west-3` → `eu-west-3a`).
    public func setAWSRegion(_ region: String) { state.withLock { $0.federation.awsAvailabilityZone = region + "a" } }

    /// The instance role's name (``awsDefaultRoleName`` unless set).
    public var awsRoleName: String { state.withLock { $0.federation.awsRoleName } }
    /// Renames the instance role: the old name's credentials path answers 404.
    public func setAWSRoleName(_ name: String) { state.withLock { $0.federation.awsRoleName = name } }

    /// The instance role's temporary credentials, as the metadata service serves them (also for
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`: the same keys).
    public var awsCredentials: FakeAWSCredentials { state.withLock { $0.federation.awsInstanceCredentials } }
    /// The instance role's access key id (`ASIA…`).
    public var awsAccessKeyID: String { awsCredentials.accessKeyID }
    /// The instance role's secret access key.
    public var awsSecretAccessKey: String { awsCredentials.secretAccessKey }
    /// The instance role's session token.
    public var awsSessionToken: String { awsCredentials.sessionToken ?? "" }

    /// New temporary credentials for the instance role; STS refuses signatures of the old ones
    /// from now on (`InvalidClientTokenId`), as for credentials that have expired.
    public func rotateAWSCredentials() {
        state.withLock { state in
            state.federation.awsKeys.removeValue(forKey: state.federation.awsInstanceCredentials.accessKeyID)
            let fresh = FakeAWSCredentials.random(temporary: true)
            state.federation.awsInstanceCredentials = fresh
            state.federation.awsKeys[fresh.accessKeyID] = fresh
        }
    }

    /// A new long-lived access key (`AKIA…`, no session token) whose signatures STS accepts, as an
    /// IAM user's in `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    public func addAWSAccessKey() -> FakeAWSCredentials {
        let key = FakeAWSCredentials.random(temporary: false)
        state.withLock { $0.federation.awsKeys[key.accessKeyID] = key }
        return key
    }

    /// Whether every metadata `GET` needs a valid IMDSv2 session token (`X-aws-ec2-metadata-token`,
    /// from `PUT /latest/api/token`): 401 without one. On by default, as on instances that
    /// require IMDSv2. Off, a request without a token is served (IMDSv1), but an invalid token is
    /// still 401.
    public var requireIMDSv2: Bool {
        get { state.withLock { $0.federation.requireIMDSv2 } }
        set { state.withLock { $0.federation.requireIMDSv2 = newValue } }
    }

    /// Every request to the AWS metadata service, in order.
    public var awsMetadataRequests: [AWSMetadataRequest] { state.withLock { $0.federation.awsMetadataRequests } }

    /// An `aws4_request` subject token for `audience` as google-auth makes it, signed with
    /// `credentials` (the instance role's when `nil`) for `region` (the instance's when `nil`)
    /// at `date`: see ``FakeAWSSignature/subjectToken(credentials:region:audience:date:signTargetResource:)``.
    public func awsSubjectToken(
        audience: String = FakeGoogle.standardAudience,
        credentials: FakeAWSCredentials? = nil,
        region: String? = nil,
        date: Date = Date()
    ) -> String {
        FakeAWSSignature.subjectToken(
            credentials: credentials ?? awsCredentials,
            region: region ?? awsRegion,
            audience: audience,
            date: date
        )
    }

    // MARK: The route

    /// The AWS instance metadata service: `PUT /latest/api/token` (IMDSv2 session tokens),
    /// `GET` of the availability zone, region, role name and the role's credentials.
    func awsMetadata(_ request: FakeRequest) -> FakeReply {
        let presented = request.headers.first(name: "X-aws-ec2-metadata-token")
        let now = Date()
        let valid = presented.map { token in
            state.withLock { ($0.federation.awsSessionTokens[token] ?? .distantPast) > now }
        }
        let reply: FakeReply
        if let fault = takeFault(.awsMetadata) {
            reply = self.reply(for: fault, api: .awsMetadata, account: "")
        } else {
            reply = awsMetadataReply(request, sessionToken: valid)
        }
        state.withLock {
            $0.federation.awsMetadataRequests.append(
                AWSMetadataRequest(
                    method: request.method.rawValue,
                    path: String(request.path),
                    hadSessionToken: valid == true,
                    status: reply.status,
                    receivedAt: now
                )
            )
        }
        return reply
    }

    /// `sessionToken`: `nil` when none was presented, else whether it is valid.
    private func awsMetadataReply(_ request: FakeRequest, sessionToken: Bool?) -> FakeReply {
        let path = String(request.path)
        if path == Self.awsTokenPath {
            guard request.method == .PUT else { return .text(405, "Method Not Allowed") }
            guard request.headers.first(name: "X-Forwarded-For") == nil else { return .text(403, "Forbidden") }
            guard let ttl = request.headers.first(name: "X-aws-ec2-metadata-token-ttl-seconds").flatMap(Int.init),
                (1...Self.awsMaxSessionTTL).contains(ttl)
            else { return .text(400, "Bad Request") }
            let token = "AQAEAFake" + FakeJSON.randomToken(40)
            state.withLock { $0.federation.awsSessionTokens[token] = Date(timeIntervalSinceNow: Double(ttl)) }
            return .text(200, token, headers: [("X-aws-ec2-metadata-token-ttl-seconds", "\(ttl)")])
        }
        guard request.method == .GET else { return .text(405, "Method Not Allowed") }
        let federation = state.withLock { $0.federation }
        if sessionToken == false || (sessionToken == nil && federation.requireIMDSv2) {
            return .text(401, "Unauthorized")
        }
        switch path {
        case Self.awsZonePath: return .text(200, federation.awsAvailabilityZone)
        case Self.awsRegionPath: return .text(200, String(federation.awsAvailabilityZone.dropLast()))
        case Self.awsCredentialsPath, Self.awsCredentialsPath + "/": return .text(200, federation.awsRoleName)
        default: break
        }
        let prefix = Self.awsCredentialsPath + "/"
        guard path.hasPrefix(prefix) else { return .text(404, "Not Found") }
        var role = Substring(path.dropFirst(prefix.count))
        if role.hasSuffix("/") { role = role.dropLast() }
        guard role == federation.awsRoleName else { return .text(404, "Not Found") }
        let credentials = federation.awsInstanceCredentials
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let expiration = credentials.expiration ?? Date(timeIntervalSinceNow: 6 * 3600)
        return .json(
            200,
            FakeJSON.encode([
                "Code": "Success", "LastUpdated": formatter.string(from: expiration.addingTimeInterval(-6 * 3600)),
                "Type": "AWS-HMAC", "AccessKeyId": credentials.accessKeyID,
                "SecretAccessKey": credentials.secretAccessKey, "Token": credentials.sessionToken ?? "",
                "Expiration": formatter.string(from: expiration),
            ])
        )
    }
}
