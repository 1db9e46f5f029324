import TokenWire

/// What became of one request sent on a connection.
enum ExchangeOutcome: Sendable {
    /// The agent's reply line.
    case reply(WireReply)
    /// The agent's reply line, with the descriptor that came with it (`SHM`); the receiver
    /// closes it.
    case replyWithDescriptor(WireReply, Int32)
    /// The connection broke, was closed or retired before the reply came; the request may be
    /// retried on a new connection.
    case lost(String)
    /// The peer broke the protocol (a reply line over the limit, an unreadable line): the
    /// connection is closed, and the call fails without being retried.
    case invalidReply(String)
    /// The call's time-out passed before its reply came.
    case timedOut
    /// The request was never written (the connection was closed or retired first): send it on
    /// another connection at once.
    case notSent
}

/// A caller waiting for its reply.
typealias ReplyWaiter = UnsafeContinuation<ExchangeOutcome, Never>

/// One request owed a reply, in the order requests were written.
struct PendingReply {
    /// Who waits for the reply; `nil` once the call timed out (the slot stays so that later
    /// replies still match their requests).
    var continuation: ReplyWaiter?
    /// When the call was queued, in `DispatchTime` uptime nanoseconds.
    var queuedAt: UInt64
    /// How long the call waits with no reply arriving on its connection, nanoseconds.
    var timeout: UInt64

    /// When the call times out if no reply arrives before: `timeout` after it was queued or
    /// after the connection's last reply (`lastReply`), whichever is later. A call queued behind
    /// others waits its turn while their replies keep coming (the agent answers in order); only
    /// an agent that answers nothing for that long times it out.
    func deadline(lastReply: UInt64) -> UInt64 {
        max(queuedAt, lastReply) &+ timeout
    }
}

/// The requests owed a reply, oldest first: a queue that reuses its storage.
struct PendingReplies {
    private var entries: [PendingReply] = []
    private var head = 0

    /// Whether no request is owed a reply.
    var isEmpty: Bool { head == entries.count }
    /// How many requests are owed a reply.
    var count: Int { entries.count - head }

    mutating func append(_ entry: PendingReply) { entries.append(entry) }

    /// The oldest request, removed; `nil` when none is owed a reply.
    mutating func popFirst() -> PendingReply? {
        guard head < entries.count else { return nil }
        let entry = entries[head]
        head += 1
        if head == entries.count {
            entries.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 64, head * 2 > entries.count {
            entries.removeFirst(head)
            head = 0
        }
        return entry
    }

    /// Takes every waiting continuation out and empties the queue.
    mutating func removeAll() -> [ReplyWaiter] {
        let waiting = entries[head...].compactMap(\.continuation)
        entries.removeAll()
        head = 0
        return waiting
    }

    /// Removes the newest `count` requests and returns their waiting continuations.
    mutating func removeLast(_ count: Int) -> [ReplyWaiter] {
        let start = entries.count - Swift.min(count, self.count)
        let removed = entries[start...].compactMap(\.continuation)
        entries.removeSubrange(start...)
        if head == entries.count {
            entries.removeAll(keepingCapacity: true)
            head = 0
        }
        return removed
    }

    /// Takes out the continuations of calls whose deadline (``PendingReply/deadline(lastReply:)``)
    /// is at or before `now` (their slots stay) and returns them with the earliest deadline still
    /// waited for.
    mutating func expire(at now: UInt64, lastReply: UInt64) -> (expired: [ReplyWaiter], next: UInt64?) {
        var expired: [ReplyWaiter] = []
        var next: UInt64?
        for index in head..<entries.count {
            guard let continuation = entries[index].continuation else { continue }
            let deadline = entries[index].deadline(lastReply: lastReply)
            if deadline <= now {
                expired.append(continuation)
                entries[index].continuation = nil
            } else {
                next = min(next ?? .max, deadline)
            }
        }
        return (expired, next)
    }
}
