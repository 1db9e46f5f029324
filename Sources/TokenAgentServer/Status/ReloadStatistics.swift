import Synchronization
import TokenAgent
import TokenWire

/// Counts configuration reloads, so `STATS` (and `fleet-tokend reload`) can tell whether the last
/// one was applied or refused.
public final class ReloadStatistics: Sendable {
    private let applied = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    /// 0 before any reload, 1 when the last was applied, 2 when it was refused.
    private let last = Atomic<Int>(0)
    private let changes = Mutex(ReloadChanges.beforeAnyReload)
    private let refusal = Mutex("-")

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

    /// Why the last reload was refused, in STATS' `reload_error` form (``StatsText``, at most
    /// ``StatsText/maxBytes`` of text); `-` before any refusal and after an applied reload.
    public var lastRefusal: String { refusal.withLock { $0 } }

    /// Counts an applied reload that made `changes` (STATS' `reload_changes` form: printable
    /// ASCII without spaces).
    public func recordApplied(changes: String) {
        self.changes.withLock { $0 = changes }
        refusal.withLock { $0 = "-" }
        last.store(1, ordering: .relaxed)
        applied.add(1, ordering: .relaxed)
    }

    /// Counts a refused reload, and keeps `reason` for STATS' `reload_error`: the text the log
    /// has (a configuration error names a key and a file, never a secret's value).
    public func recordRefused(reason: String) {
        refusal.withLock { $0 = StatsText.encode(reason) }
        last.store(2, ordering: .relaxed)
        refused.add(1, ordering: .relaxed)
    }
}
