import AsyncHTTPClient
import NIOCore
import Synchronization
import TokenWire

/// One way of getting an access token over HTTP: which request, to where, and how its reply reads.
enum AccessTokenGrant: Sendable, CustomStringConvertible {
    /// A service-account key: a JWT-bearer assertion signed here, posted to its `token_uri`.
    case serviceAccount(ServiceAccountCredentials)
    /// A gcloud user: a refresh-token grant posted to its `token_uri`.
    case authorizedUser(AuthorizedUserCredentials)
    /// The metadata server at `host` (`host` or `host:port`).
    case metadataServer(host: String)
    /// Workload Identity Federation: a subject token exchanged at STS, then maybe impersonation.
    case externalAccount(ExternalAccountExchange)

    /// The metadata server's token path (the instance's default service account).
    static let metadataTokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    /// The grant's credentials (never a secret) and endpoint.
    var description: String {
        switch self {
        case .serviceAccount(let account): "\(account) at \(endpoint)"
        case .authorizedUser(let user): "\(user) at \(endpoint)"
        case .metadataServer: endpoint
        case .externalAccount(let exchange): "\(exchange.account.summary) at \(endpoint)"
        }
    }

    /// The endpoint the grant asks, for messages (no query, no user-info).
    var endpoint: String {
        switch self {
        case .serviceAccount(let account): "token endpoint \(account.tokenEndpoint)"
        case .authorizedUser(let user): "token endpoint \(user.tokenEndpoint)"
        case .metadataServer(let host): "metadata server \(host)"
        case .externalAccount(let exchange): "STS \(exchange.account.tokenURL)"
        }
    }
}

/// A fetched access token and the lifetime it was given, seconds.
struct FetchedAccessToken: Sendable, CustomStringConvertible {
    var value: String
    var lifetime: Double

    /// The token by its fingerprint, never its text.
    var description: String { "access token \(TokenFingerprint.of(value)) for \(lifetime) s" }
}

/// Makes the HTTP exchange of an ``AccessTokenGrant``: bounded body, time-outs, no redirects, and
/// errors that name the endpoint, the status and the OAuth `error`, never a secret.
final class AccessTokenExchange: Sendable {
    /// The largest reply body read, bytes.
    static let maxBodyBytes = 64 * 1024

    let grant: AccessTokenGrant
    private let connectTimeout: Double
    private let timeout: Double
    private let clock: any AgentClock
    /// The client, made at the first fetch (so a source that never fetches holds no connections),
    /// and whether the source was shut down: under one lock, so a client is never made after
    /// ``shutdown()`` took the last one.
    private let client = Mutex<(made: HTTPClient?, isShutDown: Bool)>((nil, false))

    init(grant: AccessTokenGrant, connectTimeout: Double, timeout: Double, clock: any AgentClock) {
        self.grant = grant
        self.connectTimeout = connectTimeout
        self.timeout = timeout
        self.clock = clock
    }

    /// Shuts the HTTP client down, if one was made; later fetches fail.
    func shutdown() async {
        let made = client.withLock { client in
            defer { client = (nil, true) }
            return client.made
        }
        try? await made?.shutdown()
    }

    deinit { client.withLock { $0.made }?.shutDownInBackground() }

    private func httpClient() throws(CredentialsError) -> HTTPClient {
        let made = client.withLock { client -> HTTPClient? in
            if client.isShutDown { return nil }
            if let made = client.made { return made }
            let made = HTTPClient.outbound(connectTimeout: connectTimeout, timeout: timeout)
            client.made = made
            return made
        }
        guard let made else { throw CredentialsError(.transient, "\(grant.endpoint): source shut down") }
        return made
    }

    /// Builds the grant's request.
    private func request() throws(CredentialsError) -> HTTPClientRequest {
        let form: [(String, String)]
        let url: String
        switch grant {
        case .metadataServer(let host):
            // Checked at start; read again into its parts, which the URL is built from.
            guard let endpoint = try? HostCredentials.metadataEndpoint(host) else {
                throw CredentialsError(.credentials, "metadata host (GCE_METADATA_HOST) is not a host or host:port")
            }
            var request = HTTPClientRequest(url: endpoint.url(AccessTokenGrant.metadataTokenPath))
            request.method = .GET
            request.headers.add(name: "Metadata-Flavor", value: "Google")
            request.headers.add(name: "Accept", value: "application/json")
            return request
        case .serviceAccount(let account):
            let assertion: String
            do {
                assertion = try account.assertion(now: clock.wallSeconds)
            } catch {
                throw CredentialsError(.credentials, "signing the assertion for \(account.email) failed")
            }
            url = account.tokenEndpoint.url()
            form = [("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), ("assertion", assertion)]
        case .externalAccount:
            throw CredentialsError(.credentials, "federation is exchanged by ExternalAccountExchange")
        case .authorizedUser(let user):
            url = user.tokenEndpoint.url()
            form = [
                ("grant_type", "refresh_token"), ("client_id", user.clientID),
                ("client_secret", user.clientSecret), ("refresh_token", user.refreshToken),
            ]
        }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        let body = form.map { PercentEncoding.encode($0) + "=" + PercentEncoding.encode($1) }
            .joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: body))
        return request
    }

    /// Fetches one access token.
    func fetch() async throws(CredentialsError) -> FetchedAccessToken {
        let endpoint = grant.endpoint
        let client = try httpClient()
        if case .externalAccount(let federation) = grant {
            return try await federation.fetch(http: FederationHTTP(client: client, timeout: timeout))
        }
        let request = try request()
        let response: OutboundReply
        do {
            response = try await client.exchange(
                request,
                timeout: .milliseconds(Int64(timeout * 1000)),
                maxBodyBytes: Self.maxBodyBytes
            )
        } catch {
            throw CredentialsError(.transient, "\(endpoint): \(error.text)")
        }
        let status = response.status
        let bytes = response.body
        switch status {
        case 200..<300:
            return try Self.read(reply: bytes, endpoint: endpoint)
        case 429, 503:
            let wait = ProviderReply.retryAfter(response.headers.first(name: "retry-after"), now: clock.wallSeconds)
            throw CredentialsError(.transient, "\(endpoint): HTTP \(status)\(Self.errorField(bytes))", retryAfter: wait)
        case 408, 300..<400, 500...:
            let redirect = (300..<400).contains(status) ? " redirect, not followed" : ""
            throw CredentialsError(.transient, "\(endpoint): HTTP \(status)\(redirect)\(Self.errorField(bytes))")
        default:
            throw CredentialsError(
                .credentials,
                "\(endpoint) refused the credentials: HTTP \(status)\(Self.errorField(bytes))\(advice)"
            )
        }
    }

    /// What to fix when the endpoint refuses the credentials.
    private var advice: String {
        switch grant {
        case .serviceAccount(let account):
            "; check that key \(account.keyID) of \(account.email) (\(account.path)) exists and is enabled"
        case .authorizedUser(let user):
            "; the refresh token in \(user.path) may be revoked or expired: run "
                + "`gcloud auth application-default login` again"
        case .metadataServer:
            "; check that the instance has a service account with the cloud-platform scope"
        case .externalAccount:
            ""
        }
    }

    /// Reads a 2xx reply strictly (``StrictJSON/object(bytes:)``: no name twice):
    /// `access_token`, `expires_in` and, if present, `token_type` Bearer. With
    /// `lifetimeAsText`, `expires_in` may also be a string of a number (as STS may send it).
    static func read(
        reply: [UInt8],
        endpoint: String,
        lifetimeAsText: Bool = false
    ) throws(CredentialsError) -> FetchedAccessToken {
        let object = try StrictJSON.object(
            bytes: reply,
            repeated: { CredentialsError(.transient, "\(endpoint): bad reply: \($0)") },
            notAnObject: { CredentialsError(.transient, "\(endpoint): bad reply: not a JSON object") }
        )
        guard case .string(let value)? = object["access_token"], !value.isEmpty,
            value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw CredentialsError(.transient, "\(endpoint): bad reply: no usable access_token")
        }
        var lifetimeValue = object["expires_in"]
        if lifetimeAsText, case .string(let text)? = lifetimeValue, let seconds = Double(text) {
            lifetimeValue = .number(seconds)
        }
        guard case .number(let lifetime)? = lifetimeValue, lifetime.isFinite, lifetime > 0 else {
            throw CredentialsError(.transient, "\(endpoint): bad reply: no positive expires_in")
        }
        if let type = object["token_type"] {
            guard case .string(let name) = type, name.lowercased() == "bearer" else {
                throw CredentialsError(.transient, "\(endpoint): bad reply: token_type is not Bearer")
            }
        }
        return FetchedAccessToken(value: value, lifetime: lifetime)
    }

    /// `, error "x" (description)` from an OAuth error body (`error`, `error_description`) or a
    /// Google API error body (`error.status`, `error.message`); empty when neither. Nothing else
    /// of the body is ever repeated. Read strictly (``StrictJSON/object(bytes:)``): a body that
    /// gives a name twice is not read, and says so, naming it.
    static func errorField(_ body: [UInt8]) -> String {
        let object: StrictJSON.Object?
        do {
            object = try StrictJSON.object(bytes: body)
        } catch {
            return ", error body not read: it gives \(error.printable) twice"
        }
        guard let object, let error = object["error"] else { return "" }
        func text(_ value: StrictJSON?) -> String? {
            if case .string(let text)? = value, !text.isEmpty { return EndpointSecurity.printable(text) }
            return nil
        }
        let name: String?
        let detail: String?
        switch error {
        case .string:
            name = text(error)
            detail = text(object["error_description"])
        case .object:
            // No name is given twice anywhere in the body.
            let inner = try? error.object()
            name = text(inner?["status"])
            detail = text(inner?["message"])
        default:
            return ""
        }
        guard let name else { return "" }
        return ", error \(name)" + (detail.map { " (\($0))" } ?? "")
    }

}
