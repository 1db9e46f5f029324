import Synchronization
import TestSupport
import Testing

@testable import TokenAgent

/// A gate the holders wait at until the test opens it.
final class Gate: Sendable {
    private let waiting = Mutex<[CheckedContinuation<Void, Never>]>([])
    private let open = Mutex(false)

    var count: Int { waiting.withLock { $0.count } }

    func pass() async {
        await withCheckedContinuation { continuation in
            let now = open.withLock { $0 }
            if now { continuation.resume() } else { waiting.withLock { $0.append(continuation) } }
        }
    }

    func openAll() {
        open.withLock { $0 = true }
        let released = waiting.withLock { list in
            defer { list = [] }
            return list
        }
        for continuation in released { continuation.resume() }
    }
}

/// Numbers appended from many tasks.
final class Recorder: Sendable {
    private let values = Mutex<[Int]>([])

    func append(_ value: Int) { values.withLock { $0.append(value) } }
    var all: [Int] { values.withLock { $0 } }
}

@Suite("AsyncLimiter")
struct AsyncLimiterTests {
    @Test func atMostLimitHoldersAndTheRestWaitInOrder() async throws {
        let limiter = AsyncLimiter(limit: 2)
        let gate = Gate()
        let order = Recorder()
        var holders: [Task<Void, any Error>] = []
        for index in 0..<6 {
            holders.append(
                Task {
                    try await limiter.withPlace {
                        order.append(index)
                        await gate.pass()
                    }
                }
            )
            // One at a time, so the arrival order is known.
            #expect(await eventually { gate.count + limiter.waiting == index + 1 })
        }
        #expect(gate.count == 2 && limiter.waiting == 4)
        gate.openAll()
        for holder in holders { try await holder.value }
        #expect(order.all == Array(0..<6), "first come, first served")
        #expect(limiter.waiting == 0)
        #expect(limiter.queueStorage == 0)
    }

    @Test func aCancelledWaiterLeavesAtOnceAndLosesNoPlace() async throws {
        let limiter = AsyncLimiter(limit: 1)
        let gate = Gate()
        let holder = Task { try await limiter.withPlace { await gate.pass() } }
        #expect(await eventually { gate.count == 1 })
        let ran = Recorder()
        let waiter = Task { try await limiter.withPlace { ran.append(1) } }
        #expect(await eventually { limiter.waiting == 1 })
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        #expect(limiter.waiting == 0, "left the queue without waiting for a place")
        #expect(ran.all.isEmpty)
        gate.openAll()
        try await holder.value
        // The place is free again: a new caller gets it at once.
        #expect(try await limiter.withPlace { 42 } == 42)
        #expect(limiter.queueStorage == 0)
    }

    @Test func theQueueShrinksUnderSustainedSaturation() async throws {
        let limiter = AsyncLimiter(limit: 1)
        // 3,000 callers through one place, many of them queued at a time, some cancelled.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<3000 {
                let task = Task { try await limiter.withPlace { await Task.yield() } }
                if index % 7 == 0 { task.cancel() }
                group.addTask { _ = try? await task.value }
            }
            try await group.waitForAll()
        }
        #expect(limiter.waiting == 0)
        #expect(limiter.queueStorage == 0, "nothing left behind")
        #expect(try await limiter.withPlace { true })
    }

    @Test func refreshesThenGetsThenWarmsAndAPromotedWarmMovesUp() async throws {
        let limiter = AsyncLimiter(limit: 1)
        let gate = Gate()
        let holder = Task { try await limiter.withPlace { await gate.pass() } }
        #expect(await eventually { gate.count == 1 })
        let order = Recorder()
        let promoted = FetchTicket(priority: .warm)
        let tickets = [
            FetchTicket(priority: .warm), FetchTicket(priority: .get), FetchTicket(priority: .refresh), promoted,
            FetchTicket(priority: .get),
        ]
        var waiters: [Task<Void, any Error>] = []
        for (index, ticket) in tickets.enumerated() {
            waiters.append(Task { try await limiter.withPlace(ticket: ticket) { order.append(index) } })
            #expect(await eventually { limiter.waiting == index + 1 })
        }
        promoted.promote()
        limiter.promote(promoted)
        gate.openAll()
        try await holder.value
        for waiter in waiters { try await waiter.value }
        #expect(order.all == [2, 1, 4, 3, 0], "refresh, GETs, the promoted WARM, then the WARM")
        #expect(limiter.queueStorage == 0)
    }

    /// Within a priority the owners take turns: one uid's ten queued fetches do not keep another
    /// uid's two, or the agent's own, waiting behind all ten.
    @Test func ownersTakeTurnsWithinAPriority() async throws {
        let limiter = AsyncLimiter(limit: 1)
        let gate = Gate()
        let holder = Task { try await limiter.withPlace { await gate.pass() } }
        #expect(await eventually { gate.count == 1 })
        let order = Recorder()
        var tickets: [(Int, FetchTicket)] = []
        for index in 0..<10 { tickets.append((index, FetchTicket(priority: .get, owner: 1001))) }
        tickets.append((100, FetchTicket(priority: .get, owner: 1002)))
        tickets.append((101, FetchTicket(priority: .get, owner: 1002)))
        tickets.append((200, FetchTicket(priority: .get)))
        tickets.append((300, FetchTicket(priority: .refresh, owner: 1002)))
        var waiters: [Task<Void, any Error>] = []
        for (position, (label, ticket)) in tickets.enumerated() {
            waiters.append(Task { try await limiter.withPlace(ticket: ticket) { order.append(label) } })
            #expect(await eventually { limiter.waiting == position + 1 })
        }
        gate.openAll()
        try await holder.value
        for waiter in waiters { try await waiter.value }
        #expect(
            order.all == [300, 0, 100, 200, 1, 101, 2, 3, 4, 5, 6, 7, 8, 9],
            "the refresh first, then uid 1001, uid 1002 and the agent's own in turn, each in arrival order"
        )
        #expect(limiter.queueStorage == 0)
    }
}

@Suite("PriorityWaiters")
struct PriorityWaitersTests {
    /// A raised waiter joins its owner's queue at the better level; stale entries are skipped and
    /// nothing is left behind.
    @Test func aRaisedWaiterKeepsItsOwnerAndNothingIsLeftBehind() {
        var waiters = PriorityWaiters<Int>()
        for number in UInt64(1)...5 { waiters.add(number, Int(number), level: 2, owner: 7) }
        waiters.add(6, 6, level: 0, owner: 8)
        waiters.add(7, 7, level: 0, owner: 8)
        waiters.raise(5, to: 0)
        _ = waiters.remove(2)
        var taken: [Int] = []
        while let (_, waiter) = waiters.next() { taken.append(waiter) }
        #expect(taken == [6, 5, 7, 1, 3, 4], "level 0: owner 8, owner 7 (the raised one), owner 8; then level 2")
        #expect(waiters.isEmpty && waiters.storage == 0)
    }
}
