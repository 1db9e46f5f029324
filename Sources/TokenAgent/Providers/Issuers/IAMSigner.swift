import AsyncHTTPClient
import Logging
import NIOCore
import Synchronization
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Mints Fleet Engine JWTs without a key: the claims are signed by Google as a service account,
/// through the IAM Credentials API `signJwt`
/// (`POST {endpoint}/v1/projects/-/serviceAccounts/{account}:signJwt`, body `{"payload": <claims
/// JSON as a string>}`, reply `{"keyId", "signedJwt"}`), authorized by an access token from the
/// host's credentials (``AccessTokenSource``).
///
/// Faults are the operator's, never an id's: a 401 refreshes the access token and tries once more;
/// a second 401, a 403 (its `details[].reason` logged with its fix), a 404 or refused credentials
/// end as ``ProviderError/misconfigured(_:retryAfter:)``, and every fetch of the kind fails at once
/// with that error for ``faultHold`` seconds before the next call to IAM. A 429 throttles; 5xx,
/// time-outs and network errors fail and back off as providers do.
public final class IAMSigner: TokenProvider {
    /// The service account whose name signs (written as `iss` and `sub`).
    public let account: String
    /// The lifetime of minted tokens, seconds.
    public let lifetime: Double
    /// How long a fault that needs the operator holds every fetch off, seconds.
    public let faultHold: Double
    /// The budget of signatures a minute, shared by every fetch of the issuer (`signs_per_minute`).
    public let signatureBudget: SignatureBudget?

    private let url: String
    private let claims: IssuerClaims
    private let credentials: any AccessTokenSource
    private let timeout: TimeAmount
    private let client: HTTPClient
    private let clock: any AgentClock
    private let logger: Logger
    /// The operator's fault in force: until when (monotonic clock, so a wall-clock step neither
    /// ends it early nor stretches it) and its text.
    private let heldFault = Mutex<(until: Double, text: String)?>(nil)

    /// The largest reply body read.
    static let maxBodyBytes = 64 * 1024

    /// Creates a signer for `account` at `endpoint` (the IAM Credentials API: scheme, host, port
    /// and an optional path prefix). `account` is a service account's email (letters, digits,
    /// `-`, `_`, `.` and one `@`), escaped into the request's path.
    public init(
        account: String,
        endpoint: ServiceEndpoint = .iamCredentials,
        claims: IssuerClaims = IssuerClaims(),
        lifetime: Double = LocalIssuer.maxLifetime,
        credentials: any AccessTokenSource,
        signatureBudget: SignatureBudget? = nil,
        faultHold: Double = 30,
        connectTimeout: Double = 2,
        timeout: Double = 10,
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger = Logger(label: "fleet-tokend.issuer")
    ) {
        self.account = account
        self.lifetime = min(max(lifetime, 60), LocalIssuer.maxLifetime)
        self.faultHold = faultHold
        self.signatureBudget = signatureBudget
        // `@` stays as it is (a path may hold it, and Google's libraries send it so); anything
        // that could end the path segment (`/`, `?`, `#`) is escaped.
        let segment = HTTPTokenProvider.percentEncode(account).replacing("%40", with: "@")
        self.url = endpoint.url("/v1/projects/-/serviceAccounts/" + segment + ":signJwt")
        self.claims = claims
        self.credentials = credentials
        self.timeout = .milliseconds(Int64(timeout * 1000))
        self.clock = clock
        self.logger = logger
        self.client = .outbound(connectTimeout: connectTimeout, timeout: timeout)
    }

    public var summary: String { "key-less issuer \(account) (IAM signJwt)" }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        if let problem = TokenIdentifier.keyProblem(kind: key.kind, id: key.id.utf8) {
            throw ProviderError.rejected("\(problem); not signed")
        }
        guard let authorization = claims.authorization(kind: key.kind, id: key.id) else {
            throw ProviderError.rejected("the issuer has no authorization claim for kind \(key.kind)")
        }
        let monotonic = clock.monotonicSeconds
        if let held = heldFault.withLock({ $0 }), monotonic < held.until {
            throw ProviderError.misconfigured(held.text, retryAfter: held.until - monotonic)
        }
        let now = clock.wallSeconds
        let issued = IssuedClaims(email: account, now: now, lifetime: lifetime, authorization: authorization)
        let payload: String
        do {
            payload = String(decoding: try issued.json(), as: UTF8.self)
        } catch {
            throw ProviderError.failed("the claims could not be encoded")
        }
        var access = try await accessToken()
        let permit = SignaturePermit.current
        var reply = try await sign(payload, with: access, permit: permit)
        if reply.status == 401 {
            // The access token expired or was revoked early: one more try with a new one, which
            // is one more request at the API, so it waits for a permit of its own.
            credentials.invalidate(access)
            access = try await accessToken()
            let retry: SignaturePermit?
            do {
                retry = try await permit?.another(deadline: clock.now + Double(timeout.nanoseconds) / 1e9)
            } catch is SignatureBudget.DeadlinePassed {
                throw ProviderError.failed("IAM signJwt HTTP 401; no signature permit for the retry in time")
            }
            defer { retry?.spend() }
            reply = try await sign(payload, with: access, permit: retry)
        }
        switch reply.status {
        case 200:
            let token = try accept(reply.body, issued: issued, payload: payload)
            // Signing works: a fault that comes back later is a new one, logged again.
            heldFault.withLock { $0 = nil }
            return token
        case 401:
            throw hold(
                "IAM signJwt for \(account): HTTP 401 twice with fresh access tokens from \(credentials.summary); "
                    + "check the host's credentials",
                logReason: "UNAUTHENTICATED"
            )
        case 400, 403, 404:
            let fault = SignerFault(status: reply.status, body: reply.body)
            if reply.status == 400 {
                logger.error(
                    "IAM signJwt refused the request as malformed",
                    metadata: [
                        "service_account": "\(account)", "payload_bytes": "\(payload.utf8.count)",
                        "claims": "iss,sub,aud,iat,exp,authorization",
                        "authorization_keys": "\(authorization.keys.sorted().joined(separator: ","))",
                    ]
                )
            }
            throw hold(fault.text(account: account), logReason: fault.reason ?? fault.googleStatus ?? "")
        case 429:
            let wait = ProviderReply.retryAfter(reply.retryAfter, now: clock.wallSeconds) ?? 30
            throw ProviderError.throttled("IAM signJwt HTTP 429", retryAfter: wait)
        default:
            throw ProviderError.failed("IAM signJwt HTTP \(reply.status)")
        }
    }

    /// The access token, or the provider error its failure is.
    private func accessToken() async throws -> AccessToken {
        do {
            return try await credentials.accessToken()
        } catch {
            switch error.fault {
            case .transient:
                if let wait = error.retryAfter {
                    throw ProviderError.throttled("host credentials: \(error.message)", retryAfter: wait)
                }
                throw ProviderError.failed("host credentials: \(error.message)")
            case .credentials:
                throw hold("host credentials refused: \(error.message)", logReason: "CREDENTIALS")
            }
        }
    }

    /// Holds every fetch off for ``faultHold`` seconds with `text`, logging the fault when it is new.
    private func hold(_ text: String, logReason: String) -> ProviderError {
        let until = clock.monotonicSeconds + faultHold
        let previous = heldFault.withLock { held in
            defer { held = (until, text) }
            return held?.text
        }
        if previous != text {
            logger.error(
                "key-less signing needs the operator",
                metadata: [
                    "service_account": "\(account)", "api": "signJwt", "reason": "\(logReason)",
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

    /// Posts `payload` to signJwt; `permit` (the fetch's signature permit) is spent as the request
    /// leaves, so the budget counts the signature from the moment IAM can see it.
    private func sign(_ payload: String, with access: AccessToken, permit: SignaturePermit?) async throws -> Reply {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer " + access.value)
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json")
        if let project = credentials.quotaProject { request.headers.add(name: "x-goog-user-project", value: project) }
        let body: Data
        do {
            body = try RS256Signer.compactJSON(["payload": payload])
        } catch {
            throw ProviderError.failed("the signJwt request could not be encoded")
        }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response: OutboundReply
        permit?.spend()
        do {
            response = try await client.exchange(request, timeout: timeout, maxBodyBytes: Self.maxBodyBytes)
        } catch {
            throw ProviderError.failed("IAM signJwt \(error.text)")
        }
        return Reply(
            status: response.status,
            body: response.body,
            retryAfter: response.headers.first(name: "retry-after")
        )
    }

    /// The token in a `signJwt` reply, once the reply is checked whole (``SignJWTReply``: the
    /// header, the key id, the signature's encoding and length) and its claims are exactly those
    /// asked for (`payload`): read strictly, so a claim given twice (which one reader takes first
    /// and another last) or a claim not asked for is never served.
    private func accept(_ body: [UInt8], issued: IssuedClaims, payload: String) throws -> FetchedToken {
        let reply = try SignJWTReply(body: body)
        guard let signed = StrictJSON(bytes: reply.payload), let asked = StrictJSON(bytes: payload.utf8),
            Self.sameClaims(signed, asked)
        else {
            throw ProviderError.failed("IAM signJwt returned a token whose claims are not those asked for")
        }
        return FetchedToken(token: reply.token, expiresAtUnixSeconds: Double(issued.exp))
    }

    /// Whether `signed` holds exactly the claims of `asked`, in any order: every name and string
    /// equal byte for byte (not merely canonically equivalent), no member twice, none missing or
    /// added.
    private static func sameClaims(_ signed: StrictJSON, _ asked: StrictJSON) -> Bool {
        switch (signed, asked) {
        case (.object(let signed), .object(let asked)):
            guard signed.count == asked.count else { return false }
            let byName = { (a: StrictJSON.Member, b: StrictJSON.Member) in
                a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
            }
            return zip(signed.sorted(by: byName), asked.sorted(by: byName)).allSatisfy {
                $0.name.utf8.elementsEqual($1.name.utf8) && sameClaims($0.value, $1.value)
            }
        case (.array(let signed), .array(let asked)):
            return signed.count == asked.count && zip(signed, asked).allSatisfy { sameClaims($0, $1) }
        case (.string(let signed), .string(let asked)):
            return signed.utf8.elementsEqual(asked.utf8)
        default:
            return signed == asked
        }
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    deinit { client.shutDownInBackground() }
}
