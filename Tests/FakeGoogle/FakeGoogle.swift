import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization
import _CryptoExtras

/// Fakes of Google's metadata server, OAuth 2.0 token endpoint and IAM Credentials API on one
/// loopback HTTP/1.1 port, for tests and (through `fake-google`) for scripts.
///
/// | path | API |
/// |---|---|
/// | `GET /computeMetadata/v1/instance/service-accounts/default/token` | metadata server (needs `Metadata-Flavor: Google`) |
/// | `POST /token` | OAuth token endpoint: `jwt-bearer` and `refresh_token` grants |
/// | `POST /v1/projects/-/serviceAccounts/{email}:signJwt` | IAM Credentials (needs a Bearer token it issued) |
/// | `POST /v1/projects/-/serviceAccounts/{email}:generateAccessToken` | IAM Credentials, the same way |
/// | `POST /v1/token` | STS token exchange (RFC 8693), Workload Identity Federation: FakeGoogle+STS.swift |
/// | `PUT /latest/api/token`, `GET /latest/meta-data/...` | AWS instance metadata (IMDSv1/v2): FakeGoogle+AWS.swift |
/// | `GET /metadata/identity/oauth2/token` | Azure instance metadata's token path (needs `Metadata: true`) |
/// | `GET /v1/projects/{project}` | Cloud Resource Manager, for google-auth's project id lookup |
///
/// Start it with ``start(host:port:accounts:)``; point the agent at ``metadataHost``
/// (`GCE_METADATA_HOST`), at a key file from ``serviceAccountKeyJSON(tokenURI:)`` or
/// ``authorizedUserJSON(tokenURI:quotaProject:)``, and at ``iamEndpoint``. Script failures with
/// ``inject(_:into:times:account:)``, read what it saw in ``signJwtCalls``,
/// ``generateAccessTokenCalls``, ``tokenRequests`` and ``metadataRequests``, and verify its
/// signatures with ``publicKey(for:)``. For Workload Identity Federation, write `external_account`
/// files with ``externalAccountJSON(audience:subjectTokenType:credentialSource:impersonate:tokenLifetime:clientID:clientSecret:)``,
/// register subject tokens with ``issueSubjectToken(audience:subject:lifetime:)``, and read
/// ``stsRequests``, ``awsMetadataRequests`` and ``azureTokenRequests``.
public final class FakeGoogle: Sendable {
    /// The service account of the key file the fake makes (``serviceAccountKeyJSON(tokenURI:)``).
    public static let keyFileAccount = "host-agent@fake-project.iam.gserviceaccount.com"
    /// The instance's service account, as the metadata server serves it.
    public static let instanceAccount = "instance@fake-project.iam.gserviceaccount.com"
    /// The signing account of a fake started without `accounts`.
    public static let defaultSigningAccount = "fleet-signer@fake-project.iam.gserviceaccount.com"
    /// The OAuth client of the authorized-user file.
    public static let clientID = "000000000000-fake.apps.googleusercontent.com"
    /// The scope the token endpoint requires in an assertion.
    public static let cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"

    struct State {
        var accounts: [String: FakeKey] = [:]
        var accessTokens: [String: IssuedAccessToken] = [:]
        var issuedOrder: [String] = []
        var accessTokenLifetime = 3600
        var iamLatencyMilliseconds = 0
        var metadataLatencyMicroseconds = 0...0
        var iamHeld = false
        var heldReplies: [@Sendable () -> Void] = []
        var faults: [FaultRule] = []
        var signJwtCalls: [SignJwtCall] = []
        var generateAccessTokenCalls: [GenerateAccessTokenCall] = []
        var impersonatedLifetimeCap: Int?
        /// The wall clock `generateAccessToken`'s `expireTime` is stamped by (Unix seconds);
        /// the machine's when `nil`.
        var expireTimeClock: (@Sendable () -> Double)?
        var tokenRequests: [TokenEndpointRequest] = []
        var metadataRequests: [MetadataRequest] = []
        var tokenURIs: Set<String> = []
        var refreshTokenRevoked = false
        var openConnections = 0
        /// STS, the AWS and Azure instance metadata and Cloud Resource Manager (Workload Identity
        /// Federation).
        var federation = FederationState()
    }

    struct FaultRule {
        var fault: FakeGoogleFault
        var api: FakeGoogleAPI
        var account: String?
        var remaining: Int?
    }

    let state = Mutex(State())
    let keyFileKey: FakeKey
    /// The authorized user's client secret and refresh token.
    let clientSecret = "fake-secret-" + FakeJSON.randomToken(12)
    let refreshToken = "1//fake-refresh-" + FakeJSON.randomToken(24)
    private let channel: any Channel
    /// The address it listens on.
    public let host: String
    /// The port it listens on.
    public let port: Int

    private init(channel: any Channel, host: String, keyFileKey: FakeKey) {
        self.channel = channel
        self.host = host
        self.port = channel.localAddress!.port!
        self.keyFileKey = keyFileKey
    }

    /// Starts a fake on `host:port` (port 0: any free port) whose IAM Credentials knows `accounts`.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        accounts: [String] = [FakeGoogle.defaultSigningAccount]
    ) async throws -> FakeGoogle {
        let keyFileKey = FakeKey(key: try await FakeKeyPool.key(named: keyFileAccount), keyID: FakeJSON.randomHex(20))
        let box = Mutex<FakeGoogle?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(FakeGoogleHandler(fake: { box.withLock { $0! } }))
                }
            }
            .bind(host: host, port: port).get()
        let fake = FakeGoogle(channel: channel, host: host, keyFileKey: keyFileKey)
        box.withLock { $0 = fake }
        for account in accounts { try await fake.addAccount(account) }
        return fake
    }

    /// Stops listening; connections already open are closed by their clients.
    public func stop() async {
        try? await channel.close()
    }

    // MARK: Addresses

    /// `host:port` of the metadata server, for `GCE_METADATA_HOST`.
    public var metadataHost: String { "\(urlHost):\(port)" }
    /// The OAuth token endpoint, for a key file's `token_uri`.
    public var tokenURI: String { "http://\(urlHost):\(port)/token" }
    /// The IAM Credentials API's root (where `https://iamcredentials.googleapis.com` would be).
    public var iamEndpoint: String { "http://\(urlHost):\(port)" }
    /// The `signJwt` URL of `account`.
    public func signJwtURL(account: String) -> String {
        "\(iamEndpoint)/v1/projects/-/serviceAccounts/\(account):signJwt"
    }

    /// The host as a URL holds it (an IPv6 address in brackets).
    var urlHost: String { host.contains(":") ? "[\(host)]" : host }

    // MARK: Credentials files

    /// A complete service-account key file (`type` `service_account`) for ``keyFileAccount``, with
    /// a private key the fake's token endpoint accepts assertions of. `tokenURI` defaults to
    /// ``tokenURI``; any other is also accepted as an assertion's `aud` from now on.
    public func serviceAccountKeyJSON(tokenURI: String? = nil) -> Data {
        let uri = tokenURI ?? self.tokenURI
        state.withLock { _ = $0.tokenURIs.insert(uri) }
        return Data(
            FakeJSON.encode([
                "type": "service_account", "project_id": "fake-project", "private_key_id": keyFileKey.keyID,
                "private_key": keyFileKey.key.pkcs8PEMRepresentation, "client_email": Self.keyFileAccount,
                "client_id": "100000000000000000001", "auth_uri": "https://accounts.google.com/o/oauth2/auth",
                "token_uri": uri, "universe_domain": "googleapis.com",
            ])
        )
    }

    /// A gcloud `authorized_user` file whose refresh token the fake's token endpoint accepts
    /// (until ``revokeRefreshToken()``). `tokenURI` `nil` leaves `token_uri` out of the file
    /// (as gcloud does), so a reader uses Google's default; pass ``tokenURI`` to use the fake.
    public func authorizedUserJSON(tokenURI: String?, quotaProject: String? = nil) -> Data {
        var object: [String: Any] = [
            "type": "authorized_user", "client_id": Self.clientID, "client_secret": clientSecret,
            "refresh_token": refreshToken, "universe_domain": "googleapis.com",
        ]
        if let tokenURI { object["token_uri"] = tokenURI }
        if let quotaProject { object["quota_project_id"] = quotaProject }
        return Data(FakeJSON.encode(object))
    }

    /// Makes the token endpoint refuse the authorized user's refresh token (`invalid_grant`).
    public func revokeRefreshToken() { state.withLock { $0.refreshTokenRevoked = true } }

    // MARK: Signing accounts

    /// Adds a service account IAM Credentials signs for. Its RSA key is made once per email per
    /// process (on a thread of the NIO pool) and shared by every fake; its key id is new per fake.
    public func addAccount(_ email: String) async throws {
        let key = FakeKey(key: try await FakeKeyPool.key(named: email), keyID: FakeJSON.randomHex(20))
        state.withLock { state in
            if state.accounts[email] == nil { state.accounts[email] = key }
        }
    }

    /// Removes a service account: `signJwt` for it answers 404.
    public func removeAccount(_ email: String) { state.withLock { _ = $0.accounts.removeValue(forKey: email) } }

    /// The accounts IAM Credentials signs for, sorted.
    public var accounts: [String] { state.withLock { $0.accounts.keys.sorted() } }

    /// The public key `account`'s JWTs verify with.
    public func publicKey(for account: String) -> _RSA.Signing.PublicKey? {
        state.withLock { $0.accounts[account]?.key.publicKey }
    }

    /// The public key of `account`, PEM (`-----BEGIN PUBLIC KEY-----`).
    public func publicKeyPEM(for account: String) -> String? { publicKey(for: account)?.pemRepresentation }

    /// The key id (`kid`) of `account`'s JWTs.
    public func keyID(for account: String) -> String? { state.withLock { $0.accounts[account]?.keyID } }

    /// The claims of `jwt` when it is RS256-signed by `account`'s key with its `kid`; else `nil`.
    public func verify(_ jwt: String, account: String) -> [String: Any]? {
        guard let key = state.withLock({ $0.accounts[account] }) else { return nil }
        return FakeJWT.verify(jwt, key: key.key.publicKey, keyID: key.keyID)
    }

    // MARK: Behaviour

    /// Answers the next `times` requests to `api` (all of them, when `nil`) with `fault`; for
    /// ``FakeGoogleAPI/iamCredentials`` only those for `account` when given. Rules are tried in
    /// the order injected.
    public func inject(_ fault: FakeGoogleFault, into api: FakeGoogleAPI, times: Int? = 1, account: String? = nil) {
        state.withLock { $0.faults.append(FaultRule(fault: fault, api: api, account: account, remaining: times)) }
    }

    /// Removes every injected fault.
    public func clearFaults() { state.withLock { $0.faults = [] } }

    /// Holds every IAM Credentials answer (`signJwt` and `generateAccessToken`) from now on (the
    /// call is recorded at once) until ``releaseIAM()``: a test that needs calls in flight
    /// together waits for them as events.
    public func holdIAM() { state.withLock { $0.iamHeld = true } }

    /// ``holdIAM()``, for tests of `signJwt`.
    public func holdSignJwt() { holdIAM() }

    /// ``releaseIAM()``, for tests of `signJwt`.
    public func releaseSignJwt() { releaseIAM() }

    /// Sends the held IAM Credentials answers and holds no more.
    public func releaseIAM() {
        let held = state.withLock { state in
            state.iamHeld = false
            defer { state.heldReplies = [] }
            return state.heldReplies
        }
        for send in held { send() }
    }

    /// Keeps `send` until ``releaseIAM()``; runs it now when nothing is held any more.
    func park(_ send: @escaping @Sendable () -> Void) {
        let parked = state.withLock { state in
            guard state.iamHeld else { return false }
            state.heldReplies.append(send)
            return true
        }
        if !parked { send() }
    }

    /// A delay before every IAM Credentials answer (`signJwt`, `generateAccessToken`): IAM's latency.
    public func setIAMLatency(milliseconds: Int) { state.withLock { $0.iamLatencyMilliseconds = milliseconds } }

    /// A delay before every answer of the metadata server's token path, drawn for each answer
    /// uniformly from `milliseconds` (to the microsecond): a real metadata server takes a few.
    public func setMetadataLatency(milliseconds: ClosedRange<Int>) {
        let microseconds = max(0, milliseconds.lowerBound) * 1000...max(0, milliseconds.upperBound) * 1000
        state.withLock { $0.metadataLatencyMicroseconds = microseconds }
    }

    /// The `expires_in` of access tokens issued from now on, seconds (3600 by default).
    public func setAccessTokenLifetime(seconds: Int) { state.withLock { $0.accessTokenLifetime = seconds } }

    /// The longest lifetime `generateAccessToken` grants from now on, seconds, whatever is asked
    /// (`nil`: the lifetime asked, as IAM grants it).
    public func capImpersonatedLifetime(seconds: Int?) { state.withLock { $0.impersonatedLifetimeCap = seconds } }

    /// Stamps `generateAccessToken`'s `expireTime` by `wallSeconds` (Unix seconds), the clock
    /// the test runs its source on, rather than the machine's: an absolute expiry must agree with
    /// the clock it is judged by however long the test takes.
    public func stampExpireTimes(by wallSeconds: @escaping @Sendable () -> Double) {
        state.withLock { $0.expireTimeClock = wallSeconds }
    }

    /// Makes every access token issued so far expired: IAM answers 401 to them.
    public func expireAccessTokens() {
        let past = Date(timeIntervalSinceNow: -1)
        state.withLock { state in
            for value in state.accessTokens.keys { state.accessTokens[value]?.expiresAt = past }
        }
    }

    // MARK: Records

    /// The connections to the fake open now, whichever API they called.
    public var openConnections: Int { state.withLock { $0.openConnections } }

    /// Every `generateAccessToken` call, in order of arrival.
    public var generateAccessTokenCalls: [GenerateAccessTokenCall] {
        state.withLock { $0.generateAccessTokenCalls }
    }
    /// How many access tokens `generateAccessToken` issued (calls answered 200).
    public var impersonatedTokenCount: Int {
        state.withLock { $0.generateAccessTokenCalls.count(where: { $0.status == 200 }) }
    }

    /// Every `signJwt` call, in order of arrival.
    public var signJwtCalls: [SignJwtCall] { state.withLock { $0.signJwtCalls } }
    /// How many JWTs were signed (`signJwt` calls answered 200).
    public var signatureCount: Int { state.withLock { $0.signJwtCalls.count(where: { $0.status == 200 }) } }
    /// Every request to the token endpoint, in order.
    public var tokenRequests: [TokenEndpointRequest] { state.withLock { $0.tokenRequests } }
    /// Every request to the metadata server's token path, in order.
    public var metadataRequests: [MetadataRequest] { state.withLock { $0.metadataRequests } }
    /// Every access token issued, in order.
    public var issuedAccessTokens: [IssuedAccessToken] {
        state.withLock { state in state.issuedOrder.compactMap { state.accessTokens[$0] } }
    }

    /// Forgets the records (not the accounts, tokens or faults), STS's, AWS's and Azure's too.
    public func clearRecords() {
        state.withLock { state in
            state.signJwtCalls = []
            state.generateAccessTokenCalls = []
            state.tokenRequests = []
            state.metadataRequests = []
            state.federation.clearRecords()
        }
    }

    /// The first fault rule for `api` (and `account`) that applies, used up by one.
    func takeFault(_ api: FakeGoogleAPI, account: String? = nil) -> FakeGoogleFault? {
        state.withLock { state in
            guard
                let index = state.faults.firstIndex(where: { rule in
                    rule.api == api && (rule.account == nil || rule.account == account)
                })
            else { return nil }
            let fault = state.faults[index].fault
            if let remaining = state.faults[index].remaining {
                if remaining <= 1 {
                    state.faults.remove(at: index)
                } else {
                    state.faults[index].remaining = remaining - 1
                }
            }
            return fault
        }
    }

    /// Issues an access token for `subject`, of `lifetime` seconds (``setAccessTokenLifetime(seconds:)``'s
    /// when `nil`).
    func issueAccessToken(
        by issuer: FakeGoogleAPI,
        for subject: String,
        lifetime: Int? = nil
    ) -> (value: String, lifetime: Int) {
        let value = "ya29.fake-" + FakeJSON.randomToken(32)
        return state.withLock { state in
            let lifetime = lifetime ?? state.accessTokenLifetime
            state.accessTokens[value] = IssuedAccessToken(
                value: value,
                issuer: issuer,
                subject: subject,
                expiresAt: Date(timeIntervalSinceNow: Double(lifetime))
            )
            state.issuedOrder.append(value)
            return (value, lifetime)
        }
    }
}
