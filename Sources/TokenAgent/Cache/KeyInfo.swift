/// What `INFO` tells about one cached key: never its token, only the token's fingerprint.
public struct KeyInfo: Sendable, Hashable {
    /// The token's fingerprint (``TokenFingerprint``); `nil` when the entry holds no token.
    public var fingerprint: String?
    /// When the token was fetched (or taken over from the previous process), Unix seconds.
    public var fetchedAt: UnixTime?
    /// The token's expiry as the token states it, Unix seconds.
    public var expiresAt: UnixTime?
    /// When its background refresh is due, Unix seconds (it happens only while the key is read
    /// within the idle time-out).
    public var nextRefresh: UnixTime?
    /// GETs of this key since its token was fetched.
    public var readsSinceFetch = 0
    /// When a client last read the key, Unix seconds.
    public var lastReadAt: UnixTime
    /// Provider failures in a row for this key.
    public var failures = 0
    /// The last fetch failure's text, if any (never a secret).
    public var lastError: String?
    /// The last fetch failure's reason.
    public var lastErrorReason: FetchFailureReason?
    /// When the last fetch failure happened, Unix seconds.
    public var lastErrorAt: UnixTime?

    /// Creates a record of a key last read at `lastReadAt`.
    public init(lastReadAt: UnixTime) { self.lastReadAt = lastReadAt }
}
