import Logging
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
/// Faults are the operator's, never an id's, and handled as ``IAMCredentialsCall`` handles them: a
/// 401 refreshes the access token and tries once more; a second 401, a 403 (its `details[].reason`
/// logged with its fix), a 404 or refused credentials end as
/// ``ProviderError/misconfigured(_:retryAfter:)``, and every fetch of the kind fails at once with
/// that error for ``faultHold`` seconds before the next call to IAM. A 429 throttles; 5xx,
/// time-outs and network errors fail and back off as providers do.
public final class IAMSigner: TokenProvider {
    /// The service account whose name signs (written as `iss` and `sub`).
    public let account: String
    /// The lifetime of minted tokens, seconds.
    public let lifetime: Double
    /// How long a fault that needs the operator holds every fetch off, seconds.
    public var faultHold: Double { call.faultHold }
    /// The budget of signatures a minute, shared by every fetch of the issuer (`signs_per_minute`).
    public let signatureBudget: SignatureBudget?

    private let claims: IssuerClaims
    private let call: IAMCredentialsCall
    private let clock: any AgentClock
    private let logger: Logger

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
        self.signatureBudget = signatureBudget
        self.claims = claims
        self.clock = clock
        self.logger = logger
        call = IAMCredentialsCall(
            method: .signJwt,
            account: account,
            endpoint: endpoint,
            credentials: credentials,
            faultHold: faultHold,
            connectTimeout: connectTimeout,
            timeout: timeout,
            clock: clock,
            logger: logger
        )
    }

    public var summary: String { "key-less issuer \(account) (IAM signJwt)" }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        if let problem = TokenIdentifier.keyProblem(kind: key.kind, id: key.id.utf8) {
            throw ProviderError.rejected("\(problem); not signed")
        }
        guard let authorization = claims.authorization(kind: key.kind, id: key.id) else {
            throw ProviderError.rejected("the issuer has no authorization claim for kind \(key.kind)")
        }
        try call.checkHeld()
        let now = clock.wallSeconds
        let issued = IssuedClaims(email: account, now: now, lifetime: lifetime, authorization: authorization)
        let payload: String
        let body: Data
        do {
            payload = String(decoding: try issued.json(), as: UTF8.self)
            body = try RS256Signer.compactJSON(["payload": payload])
        } catch {
            throw ProviderError.failed("the claims could not be encoded")
        }
        func malformed() {
            logger.error(
                "IAM signJwt refused the request as malformed",
                metadata: [
                    "service_account": "\(account)", "payload_bytes": "\(payload.utf8.count)",
                    "claims": "iss,sub,aud,iat,exp,authorization",
                    "authorization_keys": "\(authorization.keys.sorted().joined(separator: ","))",
                ]
            )
        }
        return try await call.post(Array(body), malformed: malformed) { reply in
            try accept(reply, issued: issued, payload: payload)
        }
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
        await call.shutdown()
    }
}
