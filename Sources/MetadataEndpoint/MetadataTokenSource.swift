/// An access token and when it expires.
public struct MetadataToken: Sendable {
    /// The token itself: never logged.
    public var accessToken: String
    /// When it expires, seconds since the Unix epoch.
    public var expiresAt: Double

    /// A token expiring at `expiresAt`.
    public init(accessToken: String, expiresAt: Double) {
        self.accessToken = accessToken
        self.expiresAt = expiresAt
    }
}

/// Where the metadata endpoint gets its entries and their tokens: the agent's access-token
/// entries and cache.
public protocol MetadataTokenSource: Sendable {
    /// The entries served now; read on every request, so a reload's entries are served from the
    /// next request on. Should be cheap (a snapshot behind a lock).
    var entries: [MetadataEntry] { get }

    /// The token of `entry`, from the cache when it holds one with enough life left.
    /// - Throws: anything: the endpoint answers 503.
    func token(for entry: MetadataEntry) async throws -> MetadataToken
}
