import Foundation

/// One request to the fake STS (`POST /v1/token`), whatever it answered.
public struct STSRequest: Sendable {
    /// `grant_type` as sent.
    public var grantType: String?
    /// `audience` as sent: the workload identity pool provider.
    public var audience: String?
    /// `subject_token_type` as sent.
    public var subjectTokenType: String?
    /// `subject_token` as sent (form-decoded; an AWS token is still the percent-encoded JSON).
    public var subjectToken: String?
    /// `scope` as sent (space-separated).
    public var scope: String?
    /// `requested_token_type` as sent.
    public var requestedTokenType: String?
    /// `options` as sent (google-auth's `userProject`, JSON percent-encoded), if any.
    public var options: String?
    /// The client id of HTTP Basic client authentication (or of `client_id` in the form), if any.
    public var clientID: String?
    /// The `x-goog-api-client` header (google-auth's says `google-byoid-sdk source/...`), if sent.
    public var apiClient: String?
    /// For an `aws4_request` subject token: whether its SigV4 signature verified (`nil` for the
    /// other types, and when the request was refused before the token was looked at).
    public var awsSignatureVerified: Bool?
    /// For an `aws4_request` subject token: the region of its URL's host, once verified.
    public var awsRegion: String?
    /// For an `aws4_request` subject token: the headers it signed (lower-case, sorted), once verified.
    public var awsSignedHeaders: [String]?
    /// For an `aws4_request` subject token: the access key id that signed it, once verified.
    public var awsAccessKeyID: String?
    /// The federated principal of the token issued (200 only):
    /// `principal://iam.googleapis.com/projects/N/locations/global/workloadIdentityPools/P/subject/S`.
    public var principal: String?
    /// The access token issued (200 only).
    public var issued: String?
    /// The `error` answered (non-200 only).
    public var error: String?
    /// The `error_description` answered (non-200 only).
    public var errorDescription: String?
    /// The HTTP status answered (0: dropped or left unanswered by a fault).
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date

    /// `scope` split at spaces.
    public var scopes: [String] { (scope ?? "").split(separator: " ").map(String.init) }
}

/// One request to the fake AWS instance metadata service (`/latest/...`).
public struct AWSMetadataRequest: Sendable {
    /// `GET` or `PUT` (or whatever was sent).
    public var method: String
    /// The path (no query).
    public var path: String
    /// Whether it carried a valid IMDSv2 session token (`X-aws-ec2-metadata-token`).
    public var hadSessionToken: Bool
    /// The HTTP status answered (0: dropped or left unanswered by a fault).
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date
}

/// One request to the fake Azure instance metadata token path (`/metadata/identity/oauth2/token`).
public struct AzureTokenRequest: Sendable {
    /// The `resource` query parameter.
    public var resource: String?
    /// The `api-version` query parameter.
    public var apiVersion: String?
    /// The `Metadata` header as sent.
    public var metadataHeader: String?
    /// The HTTP status answered (0: dropped or left unanswered by a fault).
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date
}

/// One request to the fake Cloud Resource Manager (`GET /v1/projects/{project}`), which
/// google-auth calls for an external account's project id.
public struct ProjectRequest: Sendable {
    /// The project in the path.
    public var project: String
    /// The HTTP status answered.
    public var status: Int
    /// When it arrived.
    public var receivedAt: Date
}

/// AWS credentials the fake AWS knows: the instance role's (from its metadata service, with a
/// session token) or a long-lived access key (``FakeGoogle/addAWSAccessKey()``, none).
public struct FakeAWSCredentials: Sendable, Hashable {
    /// `ASIA…` (temporary) or `AKIA…` (long-lived).
    public var accessKeyID: String
    /// The secret access key.
    public var secretAccessKey: String
    /// The session token of temporary credentials.
    public var sessionToken: String?
    /// When temporary credentials expire (as the metadata service says; the fake does not enforce it).
    public var expiration: Date?

    private static func randomBytes(_ count: Int) -> [UInt8] { (0..<count).map { _ in UInt8.random(in: 0...255) } }

    /// New random temporary credentials (`ASIA` + 16 characters, a 40-character secret, a
    /// session token) expiring in 6 hours, or long-lived ones (`AKIA`, no session token).
    static func random(temporary: Bool) -> FakeAWSCredentials {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
        let id = (temporary ? "ASIA" : "AKIA") + String((0..<16).map { _ in alphabet.randomElement()! })
        let secret = Data(randomBytes(30)).base64EncodedString()
        return FakeAWSCredentials(
            accessKeyID: id,
            secretAccessKey: secret,
            // Base64, as AWS's are: `+` and `/` test the percent-encoding of the subject token.
            sessionToken: temporary ? "IQoJb3JpZ2luX2VjEFake" + Data(randomBytes(180)).base64EncodedString() : nil,
            expiration: temporary ? Date(timeIntervalSinceNow: 6 * 3600) : nil
        )
    }
}

/// The fake's Workload Identity Federation state: STS, AWS and Azure (one lock with the rest,
/// in ``FakeGoogle/State``).
struct FederationState {
    /// Subject tokens STS accepts: token → audience → the subject it names.
    var subjectTokens: [String: [String: String]] = [:]
    /// Audiences STS knows besides those of the subject tokens (the standard one always).
    var audiences: Set<String> = [FakeGoogle.standardAudience]
    /// Registered STS clients: id → secret.
    var stsClients: [String: String] = [:]
    var stsExpiresInAsString = false
    var stsRequests: [STSRequest] = []

    var awsAvailabilityZone = "us-east-1b"
    var awsRoleName = FakeGoogle.awsDefaultRoleName
    var awsInstanceCredentials = FakeAWSCredentials.random(temporary: true)
    /// Every key AWS accepts signatures of, by access key id: the instance's and long-lived ones.
    var awsKeys: [String: FakeAWSCredentials] = [:]
    /// IMDSv2 session tokens and when they expire.
    var awsSessionTokens: [String: Date] = [:]
    var requireIMDSv2 = true
    var awsMetadataRequests: [AWSMetadataRequest] = []

    /// Azure resources → the token served for each.
    var azureResources: [String: String] = [:]
    var azureTokenRequests: [AzureTokenRequest] = []

    var projectRequests: [ProjectRequest] = []

    init() {
        awsKeys[awsInstanceCredentials.accessKeyID] = awsInstanceCredentials
    }

    mutating func clearRecords() {
        stsRequests = []
        awsMetadataRequests = []
        azureTokenRequests = []
        projectRequests = []
    }
}
