import AsyncHTTPClient
import Logging
import NIOCore
import Synchronization

/// One method of the IAM Credentials API called for one service account, authorized by the host's
/// credentials: `signJwt` for a key-less issuer, `generateAccessToken` for an access token by
/// impersonation. Both fail the same ways, and this is where those ways are handled once.
///
/// `POST {endpoint}/v1/projects/-/serviceAccounts/{account}:{method}`, built from the endpoint's
/// parts (``ServiceEndpoint``), with `Authorization: Bearer <the host's access token>` (and
/// `x-goog-user-project` for a gcloud user with a quota project), as ``IAMCredentialsRequest``
/// makes it. The fetch's permit of its budget (``SignaturePermit``) is spent as the request leaves.
///
/// Faults are the operator's, never an id's: a 401 refreshes the access token and tries once more
/// (a second request, so a second permit); a second 401, a 400, 403 (its `details[].reason` read
/// by ``SignerFault``, which names the fix), 404 or refused credentials end as
/// ``ProviderError/misconfigured(_:retryAfter:)``, logged once when it changes, and every call
/// fails at once with that error for ``faultHold`` seconds without reaching IAM. A 429 throttles
/// (its `Retry-After`, else 30 s); 5xx, time-outs and network errors fail and back off.
///
/// A federated host identity's impersonation (``ExternalAccountExchange``) calls
/// `generateAccessToken` too, but not through this: it is the host's credentials being made, so
/// its Bearer is the federated token (a 401 drops that token, not a host token), its URL is the
/// file's, it holds nothing off and fails as ``CredentialsError``. It shares the request's set-up
/// (``IAMCredentialsRequest``: the path's shape, the headers), its body
/// (``ImpersonatedAccessTokens/requestBody(scopes:lifetime:delegates:)``) and the reply's reader
/// (``GenerateAccessTokenReply``).
final class IAMCredentialsCall: Sendable {
    /// The method called.
    enum Method: String, Sendable {
        case signJwt
        case generateAccessToken

        /// What the log says when the method needs the operator.
        var operatorMessage: Logger.Message {
            switch self {
            case .signJwt: return "key-less signing needs the operator"
            case .generateAccessToken: return "access token impersonation needs the operator"
            }
        }

        /// `IAM <method>`, as errors name the call.
        var name: String { "IAM \(rawValue)" }

        /// A fault of the call that is IAM's, not the operator's (a reply it should not have
        /// sent): `IAM <method> <text>`, failed.
        func fault(_ text: String) -> ProviderError { .failed("\(name) \(text)") }
    }

    /// The method called.
    let method: Method
    /// The service account it is called for.
    let account: String
    /// How long a fault that needs the operator holds every call off, seconds.
    let faultHold: Double
    /// The host's credentials.
    let credentials: any AccessTokenSource
    private let url: String
    private let timeout: TimeAmount
    private let client: HTTPClient
    private let clock: any AgentClock
    private let logger: Logger
    /// The operator's fault in force: until when (monotonic clock, so a wall-clock step neither
    /// ends it early nor stretches it) and its text.
    private let heldFault = Mutex<(until: Double, text: String)?>(nil)

    /// The largest reply body read.
    static let maxBodyBytes = 64 * 1024

    /// A call of `method` for `account` (a service account's email: letters, digits, `-`, `_`, `.`
    /// and one `@`, escaped into the request's path) at `endpoint`.
    init(
        method: Method,
        account: String,
        endpoint: ServiceEndpoint,
        credentials: any AccessTokenSource,
        faultHold: Double,
        connectTimeout: Double,
        timeout: Double,
        clock: any AgentClock,
        logger: Logger
    ) {
        self.method = method
        self.account = account
        self.faultHold = faultHold
        self.credentials = credentials
        url = endpoint.url(IAMCredentialsRequest.path(account: account, method: method))
        self.timeout = .milliseconds(Int64(timeout * 1000))
        self.clock = clock
        self.logger = logger
        client = .outbound(connectTimeout: connectTimeout, timeout: timeout)
    }

    /// `IAM <method>`, as errors name the call.
    var name: String { method.name }

    /// Throws the operator's fault while it holds calls off.
    func checkHeld() throws(ProviderError) {
        let monotonic = clock.monotonicSeconds
        if let held = heldFault.withLock({ $0 }), monotonic < held.until {
            throw .misconfigured(held.text, retryAfter: held.until - monotonic)
        }
    }

    /// Posts `body` (JSON) and returns what `read` makes of the body of a 200 reply (the caller's
    /// reply type: ``SignJWTReply``, ``GenerateAccessTokenReply``). Once it is read, the call
    /// worked: a fault that comes back later is a new one, logged again. Any other outcome, and
    /// what `read` throws, is thrown as the ``ProviderError`` it is. `malformed` runs before a 400
    /// is thrown, to log what was sent (never a secret).
    func post<Value>(
        _ body: [UInt8],
        malformed: () -> Void = {},
        read: ([UInt8]) throws -> Value
    ) async throws -> Value {
        let value = try read(try await post(body, malformed: malformed))
        heldFault.withLock { $0 = nil }
        return value
    }

    private func post(_ body: [UInt8], malformed: () -> Void) async throws -> [UInt8] {
        try checkHeld()
        var access = try await accessToken()
        let permit = SignaturePermit.current
        var reply = try await send(body, with: access, permit: permit)
        if reply.status == 401 {
            // The access token expired or was revoked early: one more try with a new one, which
            // is one more request at the API, so it waits for a permit of its own.
            credentials.invalidate(access)
            access = try await accessToken()
            let retry: SignaturePermit?
            do {
                retry = try await permit?.another(deadline: clock.now + Double(timeout.nanoseconds) / 1e9)
            } catch is SignatureBudget.DeadlinePassed {
                throw ProviderError.failed("\(name) HTTP 401; no signature permit for the retry in time")
            }
            defer { retry?.spend() }
            reply = try await send(body, with: access, permit: retry)
        }
        switch reply.status {
        case 200:
            return reply.body
        case 401:
            throw hold(
                "\(name) for \(account): HTTP 401 twice with fresh access tokens from \(credentials.summary); "
                    + "check the host's credentials",
                logReason: "UNAUTHENTICATED"
            )
        case 400, 403, 404:
            let fault = SignerFault(status: reply.status, body: reply.body, method: method)
            if reply.status == 400 { malformed() }
            throw hold(fault.text(account: account), logReason: fault.reason ?? fault.googleStatus ?? "")
        case 429:
            let wait = ProviderReply.retryAfter(reply.retryAfter, now: clock.wallSeconds) ?? 30
            throw ProviderError.throttled("\(name) HTTP 429", retryAfter: wait)
        default:
            throw ProviderError.failed("\(name) HTTP \(reply.status)")
        }
    }

    /// The host's access token, or the provider error its failure is.
    func accessToken() async throws(ProviderError) -> AccessToken {
        do {
            return try await credentials.accessToken()
        } catch {
            switch error.fault {
            case .transient:
                if let wait = error.retryAfter {
                    throw .throttled("host credentials: \(error.message)", retryAfter: wait)
                }
                throw .failed("host credentials: \(error.message)")
            case .credentials:
                throw hold("host credentials refused: \(error.message)", logReason: "CREDENTIALS")
            }
        }
    }

    /// Holds every call off for ``faultHold`` seconds with `text`, logging the fault when it is new.
    private func hold(_ text: String, logReason: String) -> ProviderError {
        let until = clock.monotonicSeconds + faultHold
        let previous = heldFault.withLock { held in
            defer { held = (until, text) }
            return held?.text
        }
        if previous != text {
            logger.error(
                method.operatorMessage,
                metadata: [
                    "service_account": "\(account)", "api": "\(method.rawValue)", "reason": "\(logReason)",
                    "problem": "\(text)",
                ]
            )
        }
        return .misconfigured(text, retryAfter: faultHold)
    }

    private struct Reply {
        var status: Int
        var body: [UInt8]
        var retryAfter: String?
    }

    /// Posts `body`; `permit` (the fetch's permit of its budget) is spent as the request leaves,
    /// so the budget counts the call from the moment IAM can see it.
    private func send(_ body: [UInt8], with access: AccessToken, permit: SignaturePermit?) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in IAMCredentialsRequest.headers(bearer: access.value, quotaProject: credentials.quotaProject)
        {
            request.headers.add(name: name, value: value)
        }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response: OutboundReply
        permit?.spend()
        do {
            response = try await client.exchange(request, timeout: timeout, maxBodyBytes: Self.maxBodyBytes)
        } catch {
            throw ProviderError.failed("\(name) \(error.text)")
        }
        return Reply(
            status: response.status,
            body: response.body,
            retryAfter: response.headers.first(name: "retry-after")
        )
    }

    /// Closes the HTTP client's connections.
    func shutdown() async {
        try? await client.shutdown()
    }

    deinit { client.shutDownInBackground() }
}
