import NIOCore
import Synchronization

/// Paces each uid's costly replies on the socket (`STATS`, `METRICS`, `INFO`: the replies
/// ``WorkCost`` prices above their line) to a budget of work a second. A connection's turns
/// (``RequestHandler/workPerTurn``) bound how long the others wait for one of its turns; this
/// bounds how often a uid's costly turns come, so that a peer asking for them without pause,
/// pipelined or over many connections, takes a small share of the socket loop's time, not every
/// moment the other peers leave free (each such reply is work the other clients on the host's
/// cores wait behind). A second's budget is answered at once; past it, each costly reply waits
/// its turn, and its connection's later replies wait behind it, in order. Cached GETs and the
/// workers' `WARM` and `TOUCH` are not paced.
final class CostlyReplyPacer: Sendable {
    /// A uid's budget: the time one work unit (``WorkCost``, a line 1) takes of it...
    private let nanosecondsPerUnit: Int64
    /// ...and what is answered at once, a second's worth of units.
    private let burstNanoseconds: Int64
    /// Per uid (every unidentified peer is one), when its next costly reply's turn is.
    private let turns = Mutex<[UInt32?: NIODeadline]>([:])

    /// Uids tracked at once; past it, those whose turn has come are forgotten first, then all.
    static let maxPeers = 4096

    /// 2,000 units a second by default: 250 `STATS`, 31 `METRICS` or 1,000 `INFO` a second a uid,
    /// about a millisecond of the loop's time (a unit is about a cached GET's 0.5 µs).
    init(unitsPerSecond: Int = 2_000) {
        let unitsPerSecond = Int64(min(max(unitsPerSecond, 1), 1_000_000_000))
        nanosecondsPerUnit = max(1_000_000_000 / unitsPerSecond, 1)
        burstNanoseconds = nanosecondsPerUnit * unitsPerSecond
    }

    /// Counts a costly reply of `units` against `uid`'s budget (`nil`: an unidentified peer) and
    /// says how long it must wait before it is written: zero within the budget. The reply is
    /// counted now, whatever the wait, so the caller writes it after the wait without asking again.
    func charge(_ uid: UInt32?, units: Int, now: NIODeadline = .now()) -> TimeAmount {
        turns.withLock { turns in
            if turns[uid] == nil, turns.count >= Self.maxPeers {
                turns = turns.filter { $0.value > now }
                if turns.count >= Self.maxPeers { turns.removeAll() }
            }
            let turn = max(turns[uid] ?? now, now)
            turns[uid] = turn + .nanoseconds(nanosecondsPerUnit * Int64(units))
            let wait = turn - now - .nanoseconds(burstNanoseconds)
            return wait > .zero ? wait : .zero
        }
    }
}
