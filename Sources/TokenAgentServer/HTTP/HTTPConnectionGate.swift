import NIOCore
import Synchronization

/// The open connections of an HTTP listener (the metrics and the metadata endpoints), oldest
/// first, which of them are being answered, and what the listener knows of each one's peer.
///
/// A connection is being answered from the moment its request is whole (the metadata endpoint;
/// the metrics listener, whose requests have no body, marks it at the head) to the moment its
/// answer is written; between requests (keep-alive), and while a request is still coming, it is
/// waiting. Past the limit a new connection closes a waiting one, so trickling peers never
/// keep a real client out: the oldest of a peer the listener refuses (``Standing/refused``) if
/// there is one, else the oldest. A new connection is refused only when every open one is being
/// answered.
final class HTTPConnectionGate: Sendable {
    /// What the listener knows of a connection's peer (the metrics listener never says).
    enum Standing: Sendable {
        /// A peer the listener serves nothing private to: the first to make room.
        case refused
        /// Not known yet (the lookup runs), or never looked up.
        case unknown
        /// A peer some of the listener's rules allow.
        case allowed
    }

    private struct Open {
        var number: UInt64
        var channel: any Channel
        /// A request is whole and its answer is not written yet: never closed to make room.
        var answering = false
        var standing = Standing.unknown
    }

    private let state = Mutex<(next: UInt64, open: [Open])>((0, []))

    /// Admits `channel` under `limit`, with the connection it displaces (to be closed by the
    /// caller): the oldest waiting one of a refused peer, else the oldest waiting one. `nil` when
    /// every open connection is being answered: then `channel` is refused.
    func admit(_ channel: any Channel, limit: Int) -> (number: UInt64, evicted: (any Channel)?)? {
        state.withLock { state in
            var evicted: (any Channel)?
            if state.open.count >= limit {
                let waiting = state.open.indices.filter { !state.open[$0].answering }
                guard let chosen = waiting.first(where: { state.open[$0].standing == .refused }) ?? waiting.first
                else { return nil }
                evicted = state.open.remove(at: chosen).channel
            }
            state.next += 1
            state.open.append(Open(number: state.next, channel: channel))
            return (state.next, evicted)
        }
    }

    /// Connection `number` is being answered (its request is whole) or waits again (its answer is
    /// written).
    func setAnswering(_ number: UInt64, _ answering: Bool) {
        update(number) { $0.answering = answering }
    }

    /// Connection `number`'s peer is known to be of `standing`.
    func setStanding(_ number: UInt64, _ standing: Standing) {
        update(number) { $0.standing = standing }
    }

    private func update(_ number: UInt64, _ change: (inout Open) -> Void) {
        state.withLock { state in
            if let index = state.open.firstIndex(where: { $0.number == number }) { change(&state.open[index]) }
        }
    }

    /// Connection `number` closed.
    func release(_ number: UInt64) {
        state.withLock { state in state.open.removeAll { $0.number == number } }
    }

    /// How many are open.
    var count: Int { state.withLock { $0.open.count } }
}
