import Synchronization
import TokenAgent

/// Counts configuration reloads, so `STATS` (and `fleet-tokend reload`) can tell whether the last
/// one was applied or refused.
public final class ReloadStatistics: Sendable {
    private let applied = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    /// 0 before any reload, 1 when the last was applied, 2 when it was refused.
    private let last = Atomic<Int>(0)
    private let changes = Mutex(ReloadChanges.beforeAnyReload)

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

    /// What the last applied reload changed, in STATS' `reload_changes` form; `-` before any.
    public var lastChanges: String { changes.withLock { $0 } }

    /// Counts an applied reload that made `changes` (STATS' `reload_changes` form: printable
    /// ASCII without spaces).
    public func recordApplied(changes: String) {
        self.changes.withLock { $0 = changes }
        last.store(1, ordering: .relaxed)
        applied.add(1, ordering: .relaxed)
    }

    /// Counts a refused reload.
    public func recordRefused() {
        last.store(2, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
    }
}
