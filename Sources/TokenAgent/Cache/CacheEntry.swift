/// What the agent knows about one (kind, id): the token it holds, if any, and the provider's
/// recent failures. Every time is on the monotonic clock except ``expiresAtUnix``.
struct CacheEntry {
    /// The token text, or `nil` when the entry only remembers failures.
    var token: String?
    /// The token's expiry as Unix seconds (what the wire reports).
    var expiresAtUnix: Int64 = 0
    /// The token's expiry on the monotonic clock.
    var expiresAt: Double = 0
    /// When the token was fetched.
    var fetchedAt: Double = 0
    /// When a background refresh is due.
    var refreshAt: Double = 0
    /// When a client last asked for this key.
    var lastRead: Double
    /// Consecutive provider failures.
    var failures = 0
    /// No fetch before this time (back-off).
    var retryAfter: Double = 0
    /// The provider's refusal is remembered until this time.
    var rejectedUntil: Double = 0
    /// The provider's refusal text.
    var rejection = ""

    init(lastRead: Double) {
        self.lastRead = lastRead
    }

    /// Seconds the token has left at `now` (negative or zero when there is none).
    func remaining(at now: Double) -> Double { token == nil ? 0 : expiresAt - now }

    /// The token's lifetime as fetched.
    var lifetime: Double { expiresAt - fetchedAt }
}
