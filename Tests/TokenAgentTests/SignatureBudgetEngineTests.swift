import Synchronization
import TestSupport
import Testing
import TokenAgentServer

@testable import TokenAgent

/// A scripted provider that draws on a signature budget and records the ids it fetched, in order.
final class BudgetedProvider: TokenProvider, Sendable {
    let scripted: ScriptedProvider
    let budget: SignatureBudget
    private let fetched = Mutex<[String]>([])

    init(clock: ManualClock, perMinute: Int) {
        scripted = ScriptedProvider(clock: clock)
        budget = SignatureBudget(perMinute: perMinute, clock: clock, wakesItself: false)
    }

    var summary: String { "budgeted" }
    var signatureBudget: SignatureBudget? { budget }
    var order: [String] { fetched.withLock { $0 } }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        fetched.withLock { $0.append(key.id) }
        return try await scripted.fetchToken(for: key)
    }
}

/// The engine with a provider that has a signature budget: a GET goes before queued refreshes
/// and WARMs (and raises a WARM it joins), a GET that gets no permit in time is `busy` with a
/// retry hint and backs nothing off, and refreshes are never lost.
@Suite("Token engine: signature budgets and WARM")
struct SignatureBudgetEngineTests {
    let clock = ManualClock()

    private func engine(_ provider: any TokenProvider, limits: FetchLimits = FetchLimits()) -> TokenEngine {
        TokenEngine(
            providers: ["vehicle": provider],
            policy: RefreshPolicy(refreshMargin: 600, minValidity: 300, idleTimeout: 600),
            fetchLimits: limits,
            clock: clock,
            random: { 0 }
        )
    }

    private func pending(_ engine: TokenEngine, _ id: String, minValidity: Int? = nil)
        -> Task<TokenEngine.Outcome, Never>?
    {
        guard case .pending(let wait) = engine.lookup(kind: "vehicle", id: id, minValidity: minValidity) else {
            return nil
        }
        return Task { await wait() }
    }

    private func token(_ outcome: TokenEngine.Outcome) -> String? {
        if case .success(let served) = outcome { return served.token }
        return nil
    }

    @Test func aGetGoesBeforeQueuedRefreshesAndWarmsAndRaisesAWarmItJoins() async throws {
        let provider = BudgetedProvider(clock: clock, perMinute: 60)  // a burst of 10, then 1 a second
        provider.scripted.setMode(.succeed(lifetime: 300))
        let engine = engine(provider)
        for index in 0..<10 { #expect(token(await engine.get(kind: "vehicle", id: "r-\(index)")) != nil) }
        // Past their refresh time (150 s into 300 s tokens), still read within the idle time-out.
        clock.advance(151)
        // The refilled burst goes to the first WARMs; the other three wait.
        let warmed = engine.warm(kind: "vehicle", ids: (0..<13).map { "w-\($0)" })
        #expect(try warmed.get() == WarmOutcome(queued: 13, cached: 0, started: 13))
        #expect(await eventually { provider.budget.counters.queued == 3 && provider.order.count == 20 })
        #expect(engine.maintain() == 10)
        #expect(await eventually { provider.budget.counters.queued == 13 })
        // Which three WARMs wait depends on which tasks asked first.
        let waiting = (0..<13).map { "w-\($0)" }.filter { !provider.order.contains($0) }
        #expect(waiting.count == 3)
        let get = try #require(pending(engine, "g-1"))
        // The GET's fetch waits for its permit before the WARM is joined (FIFO among GETs).
        #expect(await eventually { provider.budget.counters.queued == 14 })
        let joined = try #require(pending(engine, waiting[2]))
        clock.advance(1)
        provider.budget.serveDue()
        #expect(token(await get.value) == "tok-g-1-21")
        clock.advance(1)
        provider.budget.serveDue()
        #expect(token(await joined.value) == "tok-\(waiting[2])-22", "the joined WARM went next, before the refreshes")
        // One permit a second; each granted fetch reaches the provider before the next permit, so
        // the provider's order is the budget's (granted all at once, the tasks ran in any order).
        for served in 23...34 {
            clock.advance(1)
            provider.budget.serveDue()
            #expect(await eventually { provider.order.count == served })
        }
        #expect(Set(provider.order[22..<32]) == Set((0..<10).map { "r-\($0)" }), "then the refreshes")
        #expect(Set(provider.order[32...]) == Set(waiting.prefix(2)), "then the WARMs")
        let counters = provider.budget.counters
        #expect(counters.signatures == 34 && counters.queued == 0 && counters.timedOut == 0)
        #expect(engine.statistics().warmFetches == 13 && engine.statistics().backgroundRefreshes == 10)
    }

    @Test func aGetPastTheBudgetWaitIsBusyWithARetryHintAndBacksNothingOff() async throws {
        let provider = BudgetedProvider(clock: clock, perMinute: 6)  // 1 at once, then 1 every 10 s
        let engine = engine(provider, limits: FetchLimits(budgetWait: 5))
        #expect(token(await engine.get(kind: "vehicle", id: "a")) == "tok-a-1")
        let late = try #require(pending(engine, "b"))
        #expect(await eventually { provider.budget.counters.queued == 1 })
        clock.advance(6)
        provider.budget.serveDue()
        let outcome = await late.value
        guard case .failure(let failure) = outcome, case .overBudget(let kind, let retryAfter) = failure else {
            Issue.record("expected overBudget, got \(outcome)")
            return
        }
        #expect(kind == "vehicle" && (1...10).contains(retryAfter))
        #expect(failure.wireError.code == .busy)
        #expect(failure.wireError.message == "signature budget of kind vehicle spent; retry after \(retryAfter) s")
        // Nothing recorded: no entry, no failure, no back-off; the next GET fetches once a permit is free.
        #expect(try engine.info(kind: "vehicle", id: "b").get() == nil)
        #expect(engine.statistics().fetchErrors == 0)
        #expect(engine.providerHealth().first?.lastFailureAt == nil)
        #expect(provider.budget.counters.timedOut == 1)
        clock.advance(Double(retryAfter))
        #expect(token(await engine.get(kind: "vehicle", id: "b")) == "tok-b-2")
        #expect(provider.order == ["a", "b"])
    }

    @Test func aRefreshWaitsAsLongAsItTakesAndOneEndedByAGetsDeadlineIsStartedAgain() async throws {
        let provider = BudgetedProvider(clock: clock, perMinute: 6)
        provider.scripted.setMode(.succeed(lifetime: 300))
        let engine = engine(provider, limits: FetchLimits(budgetWait: 5))
        #expect(token(await engine.get(kind: "vehicle", id: "k")) == "tok-k-1")
        clock.advance(151)
        // The refilled permit goes to another key; then a GET that wants more validity than `k`
        // has left starts a GET-priority fetch of `k`, which the refresher then finds in flight.
        #expect(token(await engine.get(kind: "vehicle", id: "x")) == "tok-x-2")
        let demanding = try #require(pending(engine, "k", minValidity: 200))
        #expect(await eventually { provider.budget.counters.queued == 1 })
        #expect(engine.maintain() == 0, "the key's fetch is in flight")
        clock.advance(6)
        provider.budget.serveDue()
        #expect(token(await demanding.value) == "tok-k-1", "no permit in time: the cached token, still servable")
        #expect(try engine.info(kind: "vehicle", id: "k").get()?.failures == 0, "no failure recorded")
        // The key's schedule survived the fetch that ended without a result: the refresher starts
        // its refresh, which waits for its permit however long that takes.
        #expect(engine.maintain() == 1)
        #expect(await eventually { provider.budget.counters.queued == 1 })
        clock.advance(60)
        provider.budget.serveDue()
        #expect(await eventually { provider.order == ["k", "x", "k"] && engine.statistics().inFlight == 0 })
        #expect(token(await engine.get(kind: "vehicle", id: "k")) == "tok-k-3")
        #expect(provider.budget.counters.timedOut == 1)
    }

    @Test func warmCountsCachedAndInFlightIdsAndStaysWithinItsBounds() async throws {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(provider, limits: FetchLimits(concurrentPerKind: 1, queuedPerKind: 4))
        #expect(token(await engine.get(kind: "vehicle", id: "c")) == "tok-c-1")
        provider.hold()
        // `c` is cached; of the rest, two WARM fetches fill the WARM half of the queue of 4.
        let first = try engine.warm(kind: "vehicle", ids: ["c", "a", "b", "d", "a"], requester: 7).get()
        #expect(first == WarmOutcome(queued: 2, cached: 1, started: 2))
        // One of them takes the kind's one place; a GET still finds room in the queue.
        #expect(await eventually { provider.heldCount == 1 })
        let get = try #require(pending(engine, "e"))
        // Ids in flight count as queued without a second fetch; `d` now fits the WARM half, `h` not.
        let again = try engine.warm(kind: "vehicle", ids: ["a", "e", "d", "h"]).get()
        #expect(again == WarmOutcome(queued: 3, cached: 0, started: 1))
        // A connection's allowance: one outstanding at most.
        provider.release()
        #expect(token(await get.value) != nil)
        #expect(await eventually { engine.statistics().inFlight == 0 })
        let allowance = WarmAllowance(limit: 1)
        provider.hold()
        let limited = try engine.warm(kind: "vehicle", ids: ["f", "g"], allowance: allowance).get()
        #expect(limited == WarmOutcome(queued: 1, cached: 0, started: 1) && allowance.outstanding == 1)
        provider.release()
        #expect(await eventually { allowance.outstanding == 0 }, "given back when the fetch ends")
        #expect(await eventually { (try? engine.warm(kind: "vehicle", ids: ["f"]).get()) == WarmOutcome(cached: 1) })
        #expect(engine.warm(kind: "nope", ids: ["a"]) == .failure(.unknownKind("nope", configured: ["vehicle"])))
    }

    @Test func aFailedWarmFetchIsBackedOffAndCountedLikeAnyOther() async throws {
        let provider = ScriptedProvider(clock: clock)
        provider.setMode(.fail(.failed("HTTP 503")))
        let engine = engine(provider)
        #expect(try engine.warm(kind: "vehicle", ids: ["z"]).get() == WarmOutcome(queued: 1, started: 1))
        #expect(await eventually { engine.statistics().fetchErrors == 1 })
        #expect(try engine.warm(kind: "vehicle", ids: ["z"]).get() == WarmOutcome(), "held off: neither")
        guard case .ready(.failure(.backingOff)) = engine.lookup(kind: "vehicle", id: "z", minValidity: nil) else {
            Issue.record("expected a back-off")
            return
        }
    }
}
