import Crypto
import Dispatch
import Synchronization
import TokenWire
import _CryptoExtras

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Mints Fleet Engine JWTs itself from a Google service-account key (RS256).
///
/// Header `{"alg":"RS256","typ":"JWT","kid":<private_key_id>}`; claims `iss` and `sub` =
/// `client_email`, `aud` = `https://fleetengine.googleapis.com/`, `iat` = now, `exp` = now +
/// lifetime, and `authorization` from ``IssuerClaims`` (`{<claim>: id}`, or a wildcard kind's
/// fixed entries).
public struct LocalIssuer: TokenProvider {
    /// The audience of Fleet Engine tokens.
    public static let audience = "https://fleetengine.googleapis.com/"
    /// The longest lifetime the issuer grants, in seconds.
    public static let maxLifetime: Double = 3600

    private let signingKey: SigningKey
    /// The key id written into the header (`private_key_id`).
    public var keyID: String { signingKey.keyID }
    /// The service account (`client_email`), written as `iss` and `sub`.
    public let email: String
    /// The lifetime of minted tokens, in seconds.
    public let lifetime: Double
    /// Whether this is the throw-away demo issuer.
    public let isDemo: Bool
    /// The budget of signatures a minute (`signs_per_minute` of a key-file issuer); `nil`: none.
    public var signatureBudget: SignatureBudget?
    private let claims: IssuerClaims
    private let clock: any AgentClock

    /// Creates an issuer from a service-account key in JSON form.
    public init(
        serviceAccountJSON: Data,
        lifetime: Double = LocalIssuer.maxLifetime,
        claimNames: [String: String] = FleetEngineKinds.claimNames,
        clock: any AgentClock = SystemAgentClock()
    ) throws {
        try self.init(
            serviceAccountJSON: serviceAccountJSON,
            lifetime: lifetime,
            claims: IssuerClaims(claimNames: claimNames),
            clock: clock
        )
    }

    /// Creates an issuer from a service-account key in JSON form, writing `claims`.
    public init(
        serviceAccountJSON: Data,
        lifetime: Double = LocalIssuer.maxLifetime,
        claims: IssuerClaims,
        clock: any AgentClock = SystemAgentClock()
    ) throws {
        let account = try ServiceAccountKey(json: serviceAccountJSON)
        let key: _RSA.Signing.PrivateKey
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: account.privateKey)
        } catch {
            throw IssuerKeyError("private_key is not an RSA private key in PEM form")
        }
        self.init(
            signingKey: SigningKey(key: key, keyID: account.privateKeyID),
            email: account.clientEmail,
            lifetime: lifetime,
            isDemo: false,
            claims: claims,
            clock: clock
        )
    }

    /// Creates the demo issuer: an RSA key made now, for trying the agent only. The key is made on
    /// a thread of its own (it takes tens of milliseconds), so the agent is ready before it is;
    /// the first fetches wait for it.
    public static func demo(
        lifetime: Double = LocalIssuer.maxLifetime,
        claimNames: [String: String] = FleetEngineKinds.claimNames,
        clock: any AgentClock = SystemAgentClock()
    ) throws -> LocalIssuer {
        LocalIssuer(
            signingKey: SigningKey.generating(),
            email: "demo-issuer@fleet-tokend.invalid",
            lifetime: lifetime,
            isDemo: true,
            claims: IssuerClaims(claimNames: claimNames),
            clock: clock
        )
    }

    private init(
        signingKey: SigningKey,
        email: String,
        lifetime: Double,
        isDemo: Bool,
        claims: IssuerClaims,
        clock: any AgentClock
    ) {
        self.signingKey = signingKey
        self.email = email
        self.lifetime = min(max(lifetime, 60), Self.maxLifetime)
        self.isDemo = isDemo
        self.claims = claims
        self.clock = clock
    }

    /// Returns once the signing key is ready (the demo issuer makes its key on a thread of its
    /// own). The synchronous members (``keyID``, ``publicKeyPEM``, ``mint(claim:id:now:)``) block
    /// until then: call this first from async code.
    public func ready() async { _ = await signingKey.ready() }

    /// The public key, PEM-encoded (for verifiers).
    public var publicKeyPEM: String { signingKey.key.publicKey.pemRepresentation }

    public var summary: String {
        isDemo ? "demo issuer (tokens for trying the agent only)" : "local issuer \(email) kid \(keyID)"
    }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        // A token for `*` would act for every id of the kind: never signed for a per-id kind.
        if let problem = TokenIdentifier.keyProblem(kind: key.kind, id: key.id.utf8) {
            throw ProviderError.rejected("\(problem); not signed")
        }
        guard let authorization = claims.authorization(kind: key.kind, id: key.id) else {
            throw ProviderError.rejected("the issuer has no authorization claim for kind \(key.kind)")
        }
        let ready = await signingKey.ready()
        do {
            return try mint(authorization: authorization, now: clock.wallSeconds.rounded(.down), key: ready)
        } catch {
            throw ProviderError.failed("signing failed")
        }
    }

    /// Mints a token whose `authorization` claim is `{claim: id}`, issued at `now`.
    public func mint(claim: String, id: String, now: Double) throws -> FetchedToken {
        try mint(authorization: [claim: id], now: now, key: signingKey.key)
    }

    private func mint(
        authorization: [String: String],
        now: Double,
        key: _RSA.Signing.PrivateKey
    ) throws -> FetchedToken {
        let claims = IssuedClaims(email: email, now: now, lifetime: lifetime, authorization: authorization)
        let token = try RS256Signer(key: key, keyID: signingKey.keyID).token(claims: claims)
        return FetchedToken(token: token, expiresAtUnixSeconds: Double(claims.exp))
    }
}

/// The issuer's RSA key, given or still being made on a thread of its own.
private final class SigningKey: Sendable {
    private struct State {
        var key: _RSA.Signing.PrivateKey?
        var keyID: String?
        var waiters: [CheckedContinuation<Void, Never>] = []
    }

    private let state: Mutex<State>
    /// Entered while the key is being made, left once it is: what a blocking reader waits on.
    private let made = DispatchGroup()

    init(key: _RSA.Signing.PrivateKey, keyID: String) {
        state = Mutex(State(key: key, keyID: keyID))
    }

    private init() {
        state = Mutex(State())
    }

    /// A key being made now, on a thread of its own.
    static func generating() -> SigningKey {
        let pending = SigningKey()
        pending.made.enter()
        DetachedThread.start {
            // A 2048-bit key can always be made; a failure here is a broken crypto library.
            let key = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
            let waiters = pending.state.withLock { state in
                state.key = key
                state.keyID = "demo-" + TokenFingerprint.of(key.publicKey.pemRepresentation)
                defer { state.waiters = [] }
                return state.waiters
            }
            pending.made.leave()
            for waiter in waiters { waiter.resume() }
        }
        return pending
    }

    /// The key, waiting (blocking) while it is made.
    var key: _RSA.Signing.PrivateKey { waitBlocking().key }
    /// Its id, waiting (blocking) while the key is made.
    var keyID: String { waitBlocking().keyID }

    private func waitBlocking() -> (key: _RSA.Signing.PrivateKey, keyID: String) {
        while true {
            if let ready = state.withLock({ state in state.key.map { ($0, state.keyID ?? "") } }) { return ready }
            made.wait()
        }
    }

    /// The key, once made, without blocking a thread.
    func ready() async -> _RSA.Signing.PrivateKey {
        if let key = state.withLock({ $0.key }) { return key }
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.key != nil { return true }
                state.waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
        return state.withLock { $0.key! }
    }
}

/// The fields of a Google service-account JSON key that the issuer needs, read strictly
/// (``StrictJSON/object(bytes:)``): a key file that gives a name twice is refused, naming it.
private struct ServiceAccountKey {
    var privateKey: String
    var privateKeyID: String
    var clientEmail: String

    init(json: Data) throws(IssuerKeyError) {
        let object: StrictJSON.Object?
        do {
            object = try StrictJSON.object(bytes: json)
        } catch {
            throw IssuerKeyError("not a service-account key: \(error)")
        }
        if object == nil, case .failure(let error) = StrictJSON.parse(bytes: json) {
            // Where the JSON breaks, never what is there (the file holds a key).
            throw IssuerKeyError("not a service-account key: not valid JSON at \(error.position)")
        }
        guard let object, case .string(let privateKey)? = object["private_key"],
            case .string(let privateKeyID)? = object["private_key_id"],
            case .string(let clientEmail)? = object["client_email"]
        else {
            throw IssuerKeyError("not a service-account key: needs private_key, private_key_id and client_email")
        }
        self.privateKey = privateKey
        self.privateKeyID = privateKeyID
        self.clientEmail = clientEmail
    }
}

/// A service-account key that cannot be used.
public struct IssuerKeyError: Error, CustomStringConvertible {
    /// Why the key cannot be used.
    public var description: String

    init(_ description: String) { self.description = description }
}
