/// A cached token as handed from one agent process to the next (a ``CacheSnapshot``: systemd's
/// file-descriptor store, or the cache file).
public struct CachedToken: Sendable, Hashable {
    /// The kind.
    public var kind: String
    /// The id.
    public var id: String
    /// The token text.
    public var token: String
    /// Its expiry, Unix seconds.
    public var expiresAt: Int64

    /// Creates a cached token.
    public init(kind: String, id: String, token: String, expiresAt: Int64) {
        self.kind = kind
        self.id = id
        self.token = token
        self.expiresAt = expiresAt
    }
}
