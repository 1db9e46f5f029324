import Synchronization
import Testing
import TokenWire

@testable import FleetTokenClient

/// ``PendingReplies``, the queue that matches replies to the requests written, oldest first.
@Suite("Client: pending replies")
struct PendingRepliesTests {
    /// Slots without a caller (as after a time-out) carry their order in `deadline` here.
    private func slot(_ number: UInt64) -> PendingReply { PendingReply(continuation: nil, deadline: number) }

    @Test func repliesMatchRequestsInTheOrderTheyWereWritten() {
        var pending = PendingReplies()
        #expect(pending.isEmpty)
        for number in 0..<200 { pending.append(slot(UInt64(number))) }
        #expect(pending.count == 200)
        // Past 64 taken and half the storage, the queue compacts itself: the order must survive it.
        var taken: [UInt64] = []
        for _ in 0..<150 { taken.append(pending.popFirst()!.deadline) }
        #expect(pending.count == 50)
        for number in 200..<300 { pending.append(slot(UInt64(number))) }
        while let entry = pending.popFirst() { taken.append(entry.deadline) }
        #expect(taken == (0..<300).map(UInt64.init))
        #expect(pending.isEmpty)
        #expect(pending.count == 0)
        let none = pending.popFirst()
        #expect(none == nil)
        // Emptied, it is used again from the start.
        pending.append(slot(7))
        let again = pending.popFirst()
        #expect(again?.deadline == 7)
    }

    @Test func aTimedOutCallKeepsItsSlotSoLaterRepliesStillMatch() async {
        let queue = PendingQueue()
        let first = queue.wait(deadline: 10)
        let second = queue.wait(deadline: 20)
        let third = queue.wait(deadline: 30)
        let (expired, next) = queue.pending.withLock { $0.expire(at: 20) }
        #expect(expired.count == 2)
        #expect(next == 30, "the earliest deadline still waited for")
        for continuation in expired { continuation.resume(returning: .timedOut) }
        #expect(await first.value == "timed out")
        #expect(await second.value == "timed out")
        #expect(queue.pending.withLock { $0.count } == 3, "the slots stay")
        // The first two replies go to the slots of the calls that timed out, the third to its caller.
        let owners = queue.pending.withLock { pending in (0..<3).map { _ in pending.popFirst()?.continuation } }
        #expect(owners[0] == nil)
        #expect(owners[1] == nil)
        owners[2]?.resume(returning: .reply(.pong))
        #expect(await third.value == "reply PONG")
        // Nothing left to expire, and nothing waited for.
        let (none, noNext) = queue.pending.withLock { $0.expire(at: .max) }
        #expect(none.isEmpty)
        #expect(noNext == nil)
    }

    @Test func removeLastHandsBackTheNewestCallsAndRemoveAllTheRest() async {
        let queue = PendingQueue()
        let calls = (1...5).map { queue.wait(deadline: 100 + UInt64($0)) }
        // The oldest is answered; the second timed out.
        queue.pending.withLock { $0.popFirst() }?.continuation?.resume(returning: .reply(.ok("1")))
        let (expired, _) = queue.pending.withLock { $0.expire(at: 102) }
        #expect(expired.count == 1)
        expired.first?.resume(returning: .timedOut)
        // The newest two were never written: handed back to be sent elsewhere.
        let unsent = queue.pending.withLock { $0.removeLast(2) }
        #expect(unsent.count == 2)
        for continuation in unsent { continuation.resume(returning: .notSent) }
        #expect(queue.pending.withLock { $0.count } == 2)
        // The connection fails: the one caller still waiting is told; the timed-out slot has none.
        let waiting = queue.pending.withLock { $0.removeAll() }
        #expect(waiting.count == 1)
        for continuation in waiting { continuation.resume(returning: .lost("closed")) }
        #expect(queue.pending.withLock { $0.isEmpty })
        var outcomes: [String] = []
        for call in calls { outcomes.append(await call.value) }
        #expect(outcomes == ["reply OK 1", "timed out", "lost closed", "not sent", "not sent"])
    }

    @Test func removeLastTakesNoMoreThanIsOwed() async {
        let queue = PendingQueue()
        let calls = (1...3).map { queue.wait(deadline: UInt64($0)) }
        queue.pending.withLock { $0.popFirst() }?.continuation?.resume(returning: .reply(.pong))
        let removed = queue.pending.withLock { $0.removeLast(10) }
        #expect(removed.count == 2)
        for continuation in removed { continuation.resume(returning: .notSent) }
        #expect(queue.pending.withLock { $0.isEmpty })
        var outcomes: [String] = []
        for call in calls { outcomes.append(await call.value) }
        #expect(outcomes == ["reply PONG", "not sent", "not sent"])
        // Used again after emptying.
        queue.pending.withLock { $0.append(PendingReply(continuation: nil, deadline: 9)) }
        #expect(queue.pending.withLock { $0.popFirst()?.deadline } == 9)
    }
}

/// A queue of pending replies shared with the callers waiting on it.
final class PendingQueue: Sendable {
    let pending = Mutex(PendingReplies())

    /// A caller that queues itself with `deadline` before this returns (the task starts at once
    /// and runs to its suspension) and ends with a description of its outcome.
    func wait(deadline: UInt64) -> Task<String, Never> {
        Task.immediate {
            let outcome = await withUnsafeContinuation { continuation in
                self.pending.withLock { $0.append(PendingReply(continuation: continuation, deadline: deadline)) }
            }
            return outcome.summary
        }
    }
}

extension ExchangeOutcome {
    /// The outcome as text, to compare.
    var summary: String {
        switch self {
        case .reply(let reply): "reply \(reply.line.dropLast())"
        case .replyWithDescriptor(let reply, let descriptor): "reply \(reply.line.dropLast()) fd \(descriptor)"
        case .lost(let reason): "lost \(reason)"
        case .invalidReply(let reason): "invalid \(reason)"
        case .timedOut: "timed out"
        case .notSent: "not sent"
        }
    }
}
