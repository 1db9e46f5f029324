import Synchronization

/// Counts configuration reloads, so `STATS` (and `fleet-tokend reload`) can tell whether the last
/// one was applied or refused.
public final class ReloadStatistics: Sendable {
    private let applied = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)

    /// Creates zeroed counters.
    public init() {}

    /// Reloads applied since start.
    public var reloads: Int { applied.load(ordering: .relaxed) }
    /// Reloads refused (the old configuration stayed) since start.
    public var failures: Int { refused.load(ordering: .relaxed) }

    /// Counts an applied reload.
    public func recordApplied() { applied.add(1, ordering: .relaxed) }
    /// Counts a refused reload.
    public func recordRefused() { refused.add(1, ordering: .relaxed) }
}
