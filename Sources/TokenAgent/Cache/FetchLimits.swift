/// The bounds on fetches. Each kind has its own lane: its own places at its provider and its own
/// bound on fetches waiting for one, so no kind's callers can starve another's. One uid may have
/// only so many first fetches waiting at once, so one worker cannot fill its kind's queue for its
/// peers.
public struct FetchLimits: Sendable, Hashable {
    /// Fetches of one kind at its provider at once (`max_concurrent_fetches`).
    public var concurrentPerKind: Int
    /// Fetches of one kind waiting for a place (`max_queued_fetches`); past it, a request that
    /// needs a new fetch of that kind gets `busy`. Joining a fetch in flight is always allowed.
    public var queuedPerKind: Int
    /// First fetches one uid's requests started that wait for a place, over every kind
    /// (`max_queued_fetches_per_uid`).
    public var queuedPerUID: Int

    /// Creates limits (the defaults are the agent's).
    public init(concurrentPerKind: Int = 16, queuedPerKind: Int = 10_000, queuedPerUID: Int = 1_000) {
        self.concurrentPerKind = max(1, concurrentPerKind)
        self.queuedPerKind = max(0, queuedPerKind)
        self.queuedPerUID = max(1, queuedPerUID)
    }
}
