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
    /// Seconds a fetch started by a request waits for a permit of its provider's
    /// ``SignatureBudget`` before its waiters get ``EngineFailure/overBudget(kind:retryAfter:)``
    /// (the agent sets it to `request_timeout`). Background refreshes and `WARM` fetches wait as
    /// long as it takes.
    public var budgetWait: Double
    /// `WARM` fetches of one kind waiting for a place: half of ``queuedPerKind``, so requests
    /// always find room.
    public var warmQueuedPerKind: Int { queuedPerKind / 2 }

    /// Creates limits (the defaults are the agent's).
    public init(
        concurrentPerKind: Int = 16,
        queuedPerKind: Int = 10_000,
        queuedPerUID: Int = 1_000,
        budgetWait: Double = 10
    ) {
        self.concurrentPerKind = max(1, concurrentPerKind)
        self.queuedPerKind = max(0, queuedPerKind)
        self.queuedPerUID = max(1, queuedPerUID)
        self.budgetWait = budgetWait.isFinite ? max(0, budgetWait) : 10
    }
}
