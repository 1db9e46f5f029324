import NIOCore
import Synchronization

/// The open connections of an HTTP listener (the metrics and the metadata endpoints), oldest
/// first, and which of them are being answered; a connection between requests (keep-alive) is
/// waiting, like one that has not sent its first. Past the limit a new connection closes the
/// oldest waiting one, so trickling peers never keep a real client out.
final class HTTPConnectionGate: Sendable {
    private struct Open {
        var number: UInt64
        var channel: any Channel
        /// A request's head came and its answer is not written yet: never closed to make room.
        var answering = false
    }

    private let state = Mutex<(next: UInt64, open: [Open])>((0, []))

    /// Admits `channel` under `limit`, with the connection it displaces (to be closed by the
    /// caller): the oldest one waiting for a request. `nil` when every open connection is being
    /// answered: then `channel` is refused.
    func admit(_ channel: any Channel, limit: Int) -> (number: UInt64, evicted: (any Channel)?)? {
        state.withLock { state in
            var evicted: (any Channel)?
            if state.open.count >= limit {
                guard let oldest = state.open.firstIndex(where: { !$0.answering }) else { return nil }
                evicted = state.open.remove(at: oldest).channel
            }
            state.next += 1
            state.open.append(Open(number: state.next, channel: channel))
            return (state.next, evicted)
        }
    }

    /// Connection `number` is being answered (a head came) or waits again (its answer is written).
    func setAnswering(_ number: UInt64, _ answering: Bool) {
        state.withLock { state in
            if let index = state.open.firstIndex(where: { $0.number == number }) {
                state.open[index].answering = answering
            }
        }
    }

    /// Connection `number` closed.
    func release(_ number: UInt64) {
        state.withLock { state in state.open.removeAll { $0.number == number } }
    }

    /// How many are open.
    var count: Int { state.withLock { $0.open.count } }
}
