import Synchronization

/// The `WARM` fetches one holder (a connection) may have outstanding at once: each fetch a `WARM`
/// starts takes one, and gives it back when it ends, however it ends.
public final class WarmAllowance: Sendable {
    /// The most `WARM` fetches a connection may have outstanding (``TokenEngine/warm(kind:ids:requester:allowance:)``).
    public static let perConnection = 256

    private let held = Atomic<Int>(0)
    /// The most outstanding at once.
    public let limit: Int

    /// An allowance of `limit` fetches.
    public init(limit: Int = WarmAllowance.perConnection) { self.limit = max(0, limit) }

    /// `WARM` fetches outstanding now.
    public var outstanding: Int { held.load(ordering: .relaxed) }

    /// Takes one; `false` (nothing taken) when all are out.
    func take() -> Bool {
        let now = held.wrappingAdd(1, ordering: .relaxed).newValue
        if now <= limit { return true }
        held.wrappingSubtract(1, ordering: .relaxed)
        return false
    }

    /// Gives one back.
    func giveBack() { held.wrappingSubtract(1, ordering: .relaxed) }
}

/// What a `WARM` did: how many of its ids now have a fetch in flight (started by it or already
/// under way) and how many were cached and servable. Ids that are neither were held off (a
/// back-off, a remembered refusal) or over a bound.
public struct WarmOutcome: Sendable, Hashable {
    /// Ids with a fetch in flight.
    public var queued = 0
    /// Ids already cached and servable.
    public var cached = 0
    /// Fetches this `WARM` started (counted in ``queued``).
    public var started = 0

    /// An outcome.
    public init(queued: Int = 0, cached: Int = 0, started: Int = 0) {
        self.queued = queued
        self.cached = cached
        self.started = started
    }
}
