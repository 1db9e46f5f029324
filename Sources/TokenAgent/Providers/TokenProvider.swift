/// Where tokens come from: an HTTP token provider, or the local issuer.
public protocol TokenProvider: Sendable {
    /// A short description for logs and status (never a secret).
    var summary: String { get }
    /// Fetches a fresh token for `key`. Throws ``ProviderError``.
    func fetchToken(for key: TokenKey) async throws -> FetchedToken
    /// Releases what the provider holds (HTTP connections). Called once at shutdown.
    func shutdown() async
}

extension TokenProvider {
    public func shutdown() async {}
}

/// Why a provider could not hand over a token.
public enum ProviderError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The provider failed: network error, time-out, 5xx, 408, 429, or a reply that is unusable.
    /// Retried with back-off.
    case failed(String)
    /// The provider refused this id: a 4xx other than 408/429, or a token for another id.
    case rejected(String)

    public var description: String {
        switch self {
        case .failed(let text): return "provider failed: \(text)"
        case .rejected(let text): return "provider rejected the id: \(text)"
        }
    }
}
