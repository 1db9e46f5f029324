import Synchronization
import Testing
import TokenWire

@testable import FleetTokenClient

/// ``PendingReplies``, the queue that matches replies to the requests written, oldest first.
@Suite("Client: pending replies")
struct PendingRepliesTests {
    /// Slots without a caller (as after a time-out) carry their order in `queuedAt` here.
    private func slot(_ number: UInt64) -> PendingReply {
        PendingReply(continuation: nil, queuedAt: number, timeout: 0)
    }

    @Test func repliesMatchRequestsInTheOrderTheyWereWritten() {
        var pending = PendingReplies()
        #expect(pending.isEmpty)
        for number in 0..<200 { pending.append(slot(UInt64(number))) }
        #expect(pending.count == 200)
        // Past 64 taken and half the storage, the queue compacts itself: the order must survive it.
        var taken: [UInt64] = []
        for _ in 0..<150 { taken.append(pending.popFirst()!.queuedAt) }
        #expect(pending.count == 50)
        for number in 200..<300 { pending.append(slot(UInt64(number))) }
        while let entry = pending.popFirst() { taken.append(entry.queuedAt) }
        #expect(taken == (0..<300).map(UInt64.init))
        #expect(pending.isEmpty)
        #expect(pending.count == 0)
        let none = pending.popFirst()
        #expect(none == nil)
        // Emptied, it is used again from the start.
        pending.append(slot(7))
        let again = pending.popFirst()
        #expect(again?.queuedAt == 7)
    }

    @Test func aTimedOutCallKeepsItsSlotSoLaterRepliesStillMatch() async {
        let queue = PendingQueue()
        let first = queue.wait(deadline: 10)
        let second = queue.wait(deadline: 20)
        let third = queue.wait(deadline: 30)
        let (expired, next) = queue.pending.withLock { $0.expire(at: 20, lastReply: 0) }
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
        let (none, noNext) = queue.pending.withLock { $0.expire(at: .max, lastReply: 0) }
        #expect(none.isEmpty)
        #expect(noNext == nil)
    }

    /// A call behind others waits while their replies keep coming: its time-out counts from the
    /// later of its queueing and the connection's last reply, so a long pipeline on a slow (but
    /// answering) agent is not cut, and an agent that answers nothing still times every call out.
    @Test func aCallBehindOthersWaitsWhileRepliesKeepComing() async {
        let queue = PendingQueue()
        let first = queue.wait(deadline: 0, timeout: 10)
        let second = queue.wait(deadline: 1, timeout: 10)
        let third = queue.wait(deadline: 2, timeout: 3)
        // Nothing answered: each call's own time-out from its queueing.
        #expect(queue.pending.withLock { $0.expire(at: 4, lastReply: 0) }.next == 5, "the third's deadline")
        // The first is answered at 4: the others now wait from then.
        queue.pending.withLock { $0.popFirst() }?.continuation?.resume(returning: .reply(.pong))
        let (none, next) = queue.pending.withLock { $0.expire(at: 6, lastReply: 4) }
        #expect(none.isEmpty, "past the third's own 5, but a reply came at 4")
        #expect(next == 7, "4 + the third's 3 s")
        // No reply since 4: at 7 the third is out, at 14 the second.
        let (late, after) = queue.pending.withLock { $0.expire(at: 7, lastReply: 4) }
        #expect(late.count == 1)
        #expect(after == 14)
        for continuation in late { continuation.resume(returning: .timedOut) }
        let (last, nothing) = queue.pending.withLock { $0.expire(at: 14, lastReply: 4) }
        #expect(last.count == 1)
        #expect(nothing == nil)
        for continuation in last { continuation.resume(returning: .timedOut) }
        #expect(await first.value == "reply PONG")
        #expect(await second.value == "timed out")
        #expect(await third.value == "timed out")
    }

    @Test func removeLastHandsBackTheNewestCallsAndRemoveAllTheRest() async {
        let queue = PendingQueue()
        let calls = (1...5).map { queue.wait(deadline: 100 + UInt64($0)) }
        // The oldest is answered; the second timed out.
        queue.pending.withLock { $0.popFirst() }?.continuation?.resume(returning: .reply(.ok("1")))
        let (expired, _) = queue.pending.withLock { $0.expire(at: 102, lastReply: 0) }
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
        queue.pending.withLock { $0.append(PendingReply(continuation: nil, queuedAt: 9, timeout: 0)) }
        #expect(queue.pending.withLock { $0.popFirst()?.queuedAt } == 9)
    }
}

/// A queue of pending replies shared with the callers waiting on it.
final class PendingQueue: Sendable {
    let pending = Mutex(PendingReplies())

    /// A caller that queues itself at `queuedAt` with `timeout` (by default its deadline is
    /// `queuedAt` itself) before this returns (the task starts at once and runs to its
    /// suspension) and ends with a description of its outcome.
    func wait(deadline queuedAt: UInt64, timeout: UInt64 = 0) -> Task<String, Never> {
        Task.immediate {
            let outcome = await withUnsafeContinuation { continuation in
                self.pending.withLock {
                    $0.append(PendingReply(continuation: continuation, queuedAt: queuedAt, timeout: timeout))
                }
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
