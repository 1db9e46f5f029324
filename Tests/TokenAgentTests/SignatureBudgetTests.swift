import Synchronization
import TestSupport
import Testing

@testable import TokenAgent

/// The signature budget on a clock the test moves (`wakesItself: false`: nothing happens between
/// the test's own calls to `serveDue()`): a burst, then the rate; priorities, promotion, deadlines
/// and cancellation; and never more than the budget in any 60 s, whatever the arrivals.
@Suite("Signature budget")
struct SignatureBudgetTests {
    let clock = ManualClock()

    private func budget(_ perMinute: Int) -> SignatureBudget {
        SignatureBudget(perMinute: perMinute, clock: clock, wakesItself: false)
    }

    /// Starts a wait for a permit for `ticket` and returns once it waits (or got one at once).
    private func wait(
        _ budget: SignatureBudget,
        _ ticket: FetchTicket,
        deadline: MonotonicInstant? = nil,
        onGrant: @escaping @Sendable () -> Void = {}
    ) async -> Task<Void, any Error> {
        let before = budget.counters
        let task = Task {
            try await budget.permitAndSend(for: ticket, deadline: deadline)
            onGrant()
        }
        func settled() -> Bool {
            let now = budget.counters
            return now.queued > before.queued || now.signatures > before.signatures || now.timedOut > before.timedOut
        }
        // Yields first (the task usually waits within a few), then polls.
        for _ in 0..<1000 where !settled() { await Task.yield() }
        _ = await eventually(settled)
        return task
    }

    @Test func aBurstAtOnceThenOnePermitPerIntervalSixtyAMinute() async throws {
        let budget = budget(60)
        #expect(budget.burst == 10)
        for _ in 0..<10 { try await budget.permitAndSend(for: FetchTicket(priority: .get)) }
        let granted = Recorder()
        var tasks: [Task<Void, any Error>] = []
        for index in 0..<3 {
            tasks.append(await wait(budget, FetchTicket(priority: .get)) { granted.append(index) })
        }
        #expect(budget.counters.queued == 3 && budget.counters.throttled == 3)
        clock.advance(0.5)
        budget.serveDue()
        #expect(budget.counters.queued == 3, "half an interval: no permit yet")
        clock.advance(0.5)
        budget.serveDue()
        #expect(await eventually { granted.all == [0] })
        clock.advance(2)
        budget.serveDue()
        for task in tasks { try await task.value }
        // 1 and 2 are granted at one look; their tasks may resume in either order.
        #expect(granted.all.first == 0 && granted.all.sorted() == [0, 1, 2])
        let counters = budget.counters
        #expect(counters.signatures == 13 && counters.queued == 0 && counters.throttled == 3 && counters.timedOut == 0)
    }

    @Test func pastTheBudgetGetsGoFirstThenRefreshesThenWarmsEachInArrivalOrder() async throws {
        let budget = budget(6)  // a burst of 1, then one every 10 s
        try await budget.permitAndSend(for: FetchTicket(priority: .warm))
        let order = Recorder()
        let arrivals: [(Int, FetchPriority)] = [
            (1, .warm), (2, .refresh), (3, .get), (4, .warm), (5, .get), (6, .refresh),
        ]
        var tasks: [Task<Void, any Error>] = []
        for (index, priority) in arrivals {
            tasks.append(await wait(budget, FetchTicket(priority: priority)) { order.append(index) })
        }
        #expect(budget.counters.queued == 6)
        // A little over the interval: the sixth grant comes once the first send (at 0) is more
        // than the cap's 61 s old.
        for step in 1...6 {
            clock.advance(10.2)
            budget.serveDue()
            #expect(await eventually { order.all.count == step })
        }
        for task in tasks { try await task.value }
        #expect(order.all == [3, 5, 2, 6, 1, 4])
    }

    @Test func aPromotedTicketJoinsTheEndOfTheGetQueue() async throws {
        let budget = budget(6)
        try await budget.permitAndSend(for: FetchTicket(priority: .get))
        let order = Recorder()
        let warm = FetchTicket(priority: .warm)
        let refresh = FetchTicket(priority: .refresh)
        var tasks = [await wait(budget, FetchTicket(priority: .get)) { order.append(0) }]
        tasks.append(await wait(budget, refresh) { order.append(1) })
        tasks.append(await wait(budget, warm) { order.append(2) })
        tasks.append(await wait(budget, FetchTicket(priority: .warm)) { order.append(3) })
        #expect(warm.promote() && warm.priority == .get && !warm.promote())
        budget.promote(warm)
        // A ticket promoted before it waits queues as a GET too.
        let early = FetchTicket(priority: .refresh)
        early.promote()
        tasks.append(await wait(budget, early) { order.append(4) })
        for step in 1...5 {
            clock.advance(10)
            budget.serveDue()
            #expect(await eventually { order.all.count == step })
        }
        for task in tasks { try await task.value }
        #expect(order.all == [0, 2, 4, 1, 3])
    }

    @Test func aWaiterWhoseDeadlinePassesLeavesWithARetryHint() async throws {
        let budget = budget(6)
        try await budget.permitAndSend(for: FetchTicket(priority: .get))
        let late = await wait(budget, FetchTicket(priority: .get), deadline: clock.now + 5)
        let patient = await wait(budget, FetchTicket(priority: .refresh))
        clock.advance(4)
        budget.serveDue()
        #expect(budget.counters.queued == 2)
        clock.advance(2)
        budget.serveDue()
        await #expect(throws: SignatureBudget.DeadlinePassed.self) { try await late.value }
        do {
            try await late.value
        } catch let passed as SignatureBudget.DeadlinePassed {
            #expect((1...5).contains(passed.retryAfter), "the next permit is 4 s away: \(passed.retryAfter)")
        }
        #expect(budget.counters.timedOut == 1 && budget.counters.queued == 1)
        // A deadline already passed: no wait at all.
        await #expect(throws: SignatureBudget.DeadlinePassed.self) {
            try await budget.permitAndSend(for: FetchTicket(priority: .get), deadline: clock.now - 1)
        }
        #expect(budget.counters.timedOut == 2)
        clock.advance(4)
        budget.serveDue()
        try await patient.value
        #expect(budget.counters.signatures == 2)
    }

    @Test func aCancelledWaiterLeavesAtOnceAndItsPermitGoesToTheNext() async throws {
        let budget = budget(6)
        try await budget.permitAndSend(for: FetchTicket(priority: .get))
        let cancelled = await wait(budget, FetchTicket(priority: .get))
        let next = await wait(budget, FetchTicket(priority: .warm))
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(budget.counters.queued == 1)
        clock.advance(10)
        budget.serveDue()
        try await next.value
        #expect(budget.counters.signatures == 2 && budget.counters.queued == 0)
    }

    @Test func theRetryHintCountsTheGetsAhead() async throws {
        let budget = budget(60)
        for _ in 0..<10 { try await budget.permitAndSend(for: FetchTicket(priority: .get)) }
        #expect(budget.retryAfter == 1)
        var tasks: [Task<Void, any Error>] = []
        for _ in 0..<5 { tasks.append(await wait(budget, FetchTicket(priority: .get))) }
        #expect(budget.retryAfter == 6, "the next permit in 1 s, then 5 GETs a second apart")
        for task in tasks { task.cancel() }
    }

    /// On the real clock the budget wakes itself: queued waiters get their permits as they fall
    /// due, and a deadline sends its waiter away, with nobody calling `serveDue()`.
    @Test(.timeLimit(.minutes(2))) func onTheRealClockTheBudgetWakesItsWaiters() async throws {
        let budget = SignatureBudget(perMinute: 600)  // a burst of 100, then one every 0.1 s
        for _ in 0..<100 { try await budget.permitAndSend(for: FetchTicket(priority: .warm)) }
        let started = ContinuousClock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 { group.addTask { try await budget.permitAndSend(for: FetchTicket(priority: .refresh)) } }
            try await group.waitForAll()
        }
        // The group ended, so the waiters were woken without `serveDue()`; no sooner than the
        // permits fell due. (A budget that never woke them would hold the test to its time limit.)
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(250), "\(elapsed)")
        // A deadline long before the next permit (a minute away) sends its waiter away.
        let slow = SignatureBudget(perMinute: 1)
        try await slow.permitAndSend(for: FetchTicket(priority: .get))
        // Sent away by its deadline, not given the permit a minute later.
        await #expect(throws: SignatureBudget.DeadlinePassed.self) {
            try await slow.permitAndSend(for: FetchTicket(priority: .get), deadline: SystemAgentClock().now + 0.2)
        }
        #expect(slow.counters.timedOut == 1 && slow.counters.queued == 0)
    }

    /// Random arrivals of every priority, some with deadlines, against budgets of 1 to 120 a
    /// minute: no 60 s window ever holds more permits than the budget, no instant more than the
    /// burst, and sustained demand is served at the full rate.
    @Test(arguments: [1 as UInt64, 2, 3, 4])
    func neverMoreThanTheBudgetInAnySixtySeconds(seed: UInt64) async throws {
        var random = SeededGenerator(seed: seed)
        let perMinute = [1, 7, 60, 120][Int(seed - 1)]
        let budget = budget(perMinute)
        var grants: [(at: Double, count: Int)] = []
        var tasks: [Task<Void, any Error>] = []
        var arrivals = 0
        for _ in 0..<300 {
            // More arrivals than the budget, in bursts and lulls.
            let count = Int.random(in: 0...(perMinute / 10 + 3), using: &random)
            let before = budget.counters.signatures
            for _ in 0..<count {
                let priority = FetchPriority.allCases.randomElement(using: &random)!
                let deadline = Bool.random(using: &random) ? clock.now + Double.random(in: 0...30, using: &random) : nil
                tasks.append(await wait(budget, FetchTicket(priority: priority), deadline: deadline))
                arrivals += 1
            }
            budget.serveDue()
            let granted = budget.counters.signatures - before
            if granted > 0 { grants.append((clock.monotonicSeconds, granted)) }
            #expect(granted <= budget.burst, "seed \(seed): \(granted) at once")
            clock.advance(Double.random(in: 0...3, using: &random))
        }
        let counters = budget.counters
        #expect(counters.signatures + counters.queued + counters.timedOut == arrivals, "seed \(seed)")
        for (index, start) in grants.enumerated() {
            let inWindow = grants[index...].prefix { $0.at < start.at + 60 }.reduce(0) { $0 + $1.count }
            #expect(inWindow <= perMinute, "seed \(seed): \(inWindow) in the 60 s from \(start.at)")
        }
        // Demand always above the rate: the budget is used up, minute after minute.
        let span = grants.last!.at - grants.first!.at
        let total = grants.reduce(0) { $0 + $1.count }
        #expect(Double(total) >= Double(perMinute) * (span / 60) * 0.9, "seed \(seed): \(total) in \(span) s")
        for task in tasks { task.cancel() }
        for task in tasks { _ = try? await task.value }
        #expect(budget.counters.queued == 0)
    }
}

extension SignatureBudget {
    /// A permit, and its request sent at once (as the engine does when its lane has a place).
    func permitAndSend(for ticket: FetchTicket, deadline: MonotonicInstant? = nil) async throws {
        try await permit(for: ticket, deadline: deadline)
        sent(ticket)
    }
}

@Suite("Signature budget: counted when sent")
struct SignatureBudgetSendTests {
    @Test func aPermitNotYetSentHoldsItsPlaceInTheCapAndCountsFromItsSend() async throws {
        let clock = ManualClock()
        let budget = SignatureBudget(perMinute: 6, clock: clock, wakesItself: false)
        // The burst is 1: one permit, its request held (waiting for a lane place) for 50 s.
        let first = FetchTicket(priority: .get)
        try await budget.permit(for: first)
        clock.advance(50)
        budget.sent(first)
        // Five more over the next 50 s (one every 10 s, the bucket's rate), sent at once.
        for _ in 0..<5 {
            clock.advance(10)
            try await budget.permitAndSend(for: FetchTicket(priority: .get))
        }
        // Six sent between 50 s and 100 s: the cap holds the next until the first send (at 50 s)
        // is 61 s old, although the bucket would have one at 110 s.
        let waiting = Task { try await budget.permitAndSend(for: FetchTicket(priority: .get)) }
        for _ in 0..<200 where budget.counters.queued == 0 { await Task.yield() }
        clock.advance(10)
        budget.serveDue()
        #expect(budget.counters.signatures == 6, "at 110 s the first send is 60 s old: still in the window")
        clock.advance(1.5)
        budget.serveDue()
        try await waiting.value
        #expect(budget.counters.signatures == 7)
        // Sending twice, or a ticket that had no permit, changes nothing.
        budget.sent(first)
        budget.sent(FetchTicket(priority: .get))
        #expect(budget.counters.signatures == 7)
    }
}
