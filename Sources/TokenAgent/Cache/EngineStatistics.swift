/// Counters of the engine, as `STATS` reports them.
public struct EngineStatistics: Sendable, Hashable {
    /// Entries held (tokens and remembered failures).
    public var entries = 0
    /// Requests answered from the cache.
    public var hits = 0
    /// Requests that had to wait for a fetch.
    public var misses = 0
    /// Fetches started at a provider.
    public var fetches = 0
    /// Fetches that failed or were refused.
    public var fetchErrors = 0
    /// Fetches started by the background refresher.
    public var backgroundRefreshes = 0
    /// Fetches in flight now.
    public var inFlight = 0
    /// First fetches cancelled while queued because every request waiting on them had gone.
    public var abandonedFetches = 0
    /// Fetches started by `WARM` (also counted in ``fetches``).
    public var warmFetches = 0
    /// Entries evicted to stay within `max_entries`.
    public var evictions = 0
    /// Cached tokens served because a fetch for a fresher one failed.
    public var servedAfterFailure = 0
    /// Records in the scheduler's due queues (current and stale).
    public var scheduled = 0
    /// Entries the scheduler has looked at since start (one per due record): what its passes cost.
    public var examined = 0
    /// When the last fetch failure happened, if ever.
    public var lastFailureAt: MonotonicInstant?
    /// The text of the last fetch failure (never a secret).
    public var lastFailure: String?
    /// The largest clock difference a provider's `Date` header showed at its last reply (its clock
    /// minus ours, seconds), if any provider sent one.
    public var providerClockSkew: Double?

    /// Creates zeroed counters.
    public init() {}

    /// The hit ratio, 0 when there was no request.
    public var hitRatio: Double {
        let total = hits + misses
        return total == 0 ? 0 : Double(hits) / Double(total)
    }
}
