import TokenWire

/// Where tokens come from: an HTTP token provider, or the local issuer.
public protocol TokenProvider: Sendable {
    /// A short description for logs and status (never a secret).
    var summary: String { get }
    /// Fetches a fresh token for `key`. Throws ``ProviderError``.
    func fetchToken(for key: TokenKey) async throws -> FetchedToken
    /// Releases what the provider holds (HTTP connections). Called once, when the provider is
    /// retired by a reload (after its last fetch ends) or at shutdown.
    func shutdown() async
    /// How far the provider's clock is ahead of ours (its `Date` header minus our wall clock) at
    /// its last reply, seconds; `nil` when unknown.
    var clockSkew: Double? { get }
    /// The budget of signatures this provider's fetches draw on (issuers that sign through a
    /// quota'd API); `nil`, the default, for none. Each fetch waits for a permit first (see
    /// ``SignatureBudget``). Several providers may share one.
    var signatureBudget: SignatureBudget? { get }
    /// The least time this provider's tokens must have left to be served, seconds, when it is
    /// more than the agent's serving floor (10 s); `nil`, the default, for the agent's. Access
    /// tokens ask for ``AccessTokenKind/servingFloor``.
    var servingFloor: Double? { get }
    /// Whether this provider's tokens stay in memory: handed to the next process only through
    /// systemd's file-descriptor store (a sealed memory file), never written to a file on disk,
    /// nor read back from one (``TokenCacheMedium``). `false`, the default, for Fleet Engine JWTs;
    /// `true` for access tokens, far bigger secrets than a per-vehicle JWT.
    var tokensStayInMemory: Bool { get }
}

extension TokenProvider {
    public func shutdown() async {}
    public var clockSkew: Double? { nil }
    public var signatureBudget: SignatureBudget? { nil }
    public var servingFloor: Double? { nil }
    public var tokensStayInMemory: Bool { false }
}

/// Why a provider could not hand over a token.
public enum ProviderError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The provider failed: network error, time-out, 5xx, 408, 429, or a reply that is unusable.
    /// Retried with back-off.
    case failed(String)
    /// The provider refused this id: a 4xx other than 408/429, or a token for another id.
    case rejected(String)
    /// The provider asked to be left alone for `retryAfter` seconds (429 or 503 with
    /// `Retry-After`): retried no sooner than that (capped at 300 s).
    case throttled(String, retryAfter: Double)
    /// The operator must fix something before any token of the kind can be had: a signer's
    /// permission or account (IAM 403/404), the host's credentials (a second 401, a refused
    /// refresh token). Never remembered as a refusal of the id; the kind is degraded at once, and
    /// nothing is tried again for `retryAfter` seconds.
    case misconfigured(String, retryAfter: Double)

    public var description: String {
        switch self {
        case .failed(let text): return "provider failed: \(text)"
        case .throttled(let text, let retryAfter):
            return "provider failed: \(text), retry after \(Int(saturating: retryAfter)) s"
        case .rejected(let text): return "provider rejected the id: \(text)"
        case .misconfigured(let text, let retryAfter):
            return "\(text); retry after \(Int(saturating: retryAfter)) s"
        }
    }
}
