import Synchronization

/// Counts configuration reloads, so `STATS` (and `fleet-tokend reload`) can tell whether the last
/// one was applied or refused.
public final class ReloadStatistics: Sendable {
    private let applied = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    /// 0 before any reload, 1 when the last was applied, 2 when it was refused.
    private let last = Atomic<Int>(0)

    /// Creates zeroed counters.
    public init() {}

    /// Reloads applied since start.
    public var reloads: Int { applied.load(ordering: .relaxed) }
    /// Reloads refused (the old configuration stayed) since start.
    public var failures: Int { refused.load(ordering: .relaxed) }

    /// Whether the last reload was applied; `nil` before the first.
    public var lastApplied: Bool? {
        switch last.load(ordering: .relaxed) {
        case 1: return true
        case 2: return false
        default: return nil
        }
    }

    /// Counts an applied reload.
    public func recordApplied() {
        last.store(1, ordering: .relaxed)
        applied.add(1, ordering: .relaxed)
    }

    /// Counts a refused reload.
    public func recordRefused() {
        last.store(2, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
    }
}
