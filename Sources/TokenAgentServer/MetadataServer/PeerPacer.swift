import NIOCore
import Synchronization

/// Paces the metadata endpoint's answers per peer, so that one local user asking without pause
/// (refused or not) costs a bounded share of the endpoint's time, as of its places and its log:
/// up to `rate` a second a peer are answered at once (a burst of as many), and past it each is
/// answered once its turn comes (`rate` a second). The answer still comes, on the same
/// connection; a request pipelined behind it waits for it. Other peers keep their own pace.
final class PeerPacer: Sendable {
    private let interval: TimeAmount
    private let burst: TimeAmount
    /// Per peer (uid; every unidentified peer is one), when its next answer's turn is.
    private let turns = Mutex<[UInt32?: NIODeadline]>([:])

    /// Peers tracked at once; past it, peers whose turn has come are forgotten first, then all.
    static let maxPeers = 4096

    /// Paces each peer's answers to `rate` a second, past a burst of as many.
    init(rate: Int) {
        let rate = max(rate, 1)
        interval = .nanoseconds(1_000_000_000 / Int64(rate))
        burst = .nanoseconds(interval.nanoseconds * Int64(rate))
    }

    /// How long to hold back an answer to `uid` (`nil`: an unidentified peer) before writing it:
    /// zero within its rate.
    func delay(for uid: UInt32?) -> TimeAmount {
        let now = NIODeadline.now()
        return turns.withLock { turns in
            if turns[uid] == nil, turns.count >= Self.maxPeers {
                turns = turns.filter { $0.value > now }
                if turns.count >= Self.maxPeers { turns.removeAll() }
            }
            let turn = max(turns[uid] ?? now, now)
            turns[uid] = turn + interval
            let wait = turn - now - burst
            return wait > .zero ? wait : .zero
        }
    }
}
