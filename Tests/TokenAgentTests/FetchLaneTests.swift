import Synchronization
import TestSupport
import Testing

@testable import TokenAgent

/// Each kind's fetches in a lane of their own: a flooded kind answers `busy` for itself only,
/// another kind's fetches and refreshes go on, abandoned first fetches are dropped, and one uid
/// cannot fill its kind's queue.
@Suite("Token engine: fetch lanes per kind")
struct FetchLaneTests {
    let clock = ManualClock()

    private func engine(_ providers: [String: any TokenProvider], limits: FetchLimits) -> TokenEngine {
        TokenEngine(providers: providers, fetchLimits: limits, clock: clock, random: { 0 })
    }

    private func token(_ outcome: TokenEngine.Outcome) -> String? {
        if case .success(let served) = outcome { return served.token }
        return nil
    }

    private func failure(_ lookup: TokenEngine.Lookup) -> EngineFailure? {
        if case .ready(.failure(let failure)) = lookup { return failure }
        return nil
    }

    /// Starts a GET of `id` of `kind` whose answer is awaited in a task of its own.
    private func pending(_ engine: TokenEngine, _ kind: String, _ id: String, uid: UInt32? = nil)
        -> Task<TokenEngine.Outcome, Never>?
    {
        guard case .pending(let wait) = engine.lookup(kind: kind, id: id, minValidity: nil, requester: uid) else {
            return nil
        }
        // Started at once: by the time this returns the request waits inside the engine.
        return Task.immediate { await wait() }
    }

    @Test func aFloodedKindIsBusyForItselfOnlyAndAnotherKindFetchesAtOnce() async {
        let slow = ScriptedProvider(clock: clock)
        slow.hold()
        let fast = ScriptedProvider(clock: clock)
        let engine = engine(
            ["custom": slow, "vehicle": fast],
            limits: FetchLimits(concurrentPerKind: 2, queuedPerKind: 5)
        )
        var waiters: [Task<TokenEngine.Outcome, Never>] = []
        for index in 0..<2 {
            if let task = pending(engine, "custom", "flood-\(index)") { waiters.append(task) }
        }
        #expect(await eventually { slow.heldCount == 2 }, "two places at the slow provider")
        for index in 2..<7 {
            if let task = pending(engine, "custom", "flood-\(index)") { waiters.append(task) }
        }
        #expect(waiters.count == 7, "five wait for a place")
        #expect(failure(engine.lookup(kind: "custom", id: "flood-7", minValidity: nil)) == .busy(kind: "custom"))
        #expect(
            failure(engine.lookup(kind: "custom", id: "flood-8", minValidity: nil))?.description
                == "too many fetches queued for kind custom"
        )
        #expect(token(await engine.get(kind: "vehicle", id: "fresh-A")) == "tok-fresh-A-1", "its own lane")
        slow.release()
        for waiter in waiters { #expect(token(await waiter.value) != nil) }
    }

    @Test func aQueuedFirstFetchNobodyWaitsForIsDropped() async throws {
        let slow = ScriptedProvider(clock: clock)
        slow.hold()
        let engine = engine(["custom": slow], limits: FetchLimits(concurrentPerKind: 1, queuedPerKind: 100))
        let running = pending(engine, "custom", "running-1")!
        #expect(await eventually { slow.heldCount == 1 })
        let queued = (0..<20).compactMap { pending(engine, "custom", "gone-\($0)") }
        #expect(await eventually { engine.statistics().inFlight == 21 })
        // Their connections close: every waiting task is cancelled.
        for task in queued { task.cancel() }
        let dropped = await eventually { engine.statistics().inFlight == 1 }
        if !dropped { slow.release() }
        try #require(dropped, "only the fetch at the provider is left")
        #expect(engine.statistics().abandonedFetches == 20)
        for task in queued {
            guard case .failure = await task.value else {
                Issue.record("an abandoned fetch answered with a token")
                continue
            }
        }
        slow.release()
        #expect(token(await running.value) == "tok-running-1-1")
        #expect(slow.fetches == 1, "no abandoned fetch reached the provider")
        // A fetch at the provider is not dropped when its waiter leaves: its token is cached.
        slow.hold()
        let leaving = pending(engine, "custom", "started-1")!
        #expect(await eventually { slow.heldCount == 1 })
        leaving.cancel()
        slow.release()
        #expect(await eventually { engine.statistics().inFlight == 0 })
        #expect(token(await engine.get(kind: "custom", id: "started-1")) == "tok-started-1-2", "cached")
    }

    @Test func aQueuedFetchTwoRequestsWaitForStaysUntilBothLeave() async throws {
        let slow = ScriptedProvider(clock: clock)
        slow.hold()
        let engine = engine(["custom": slow], limits: FetchLimits(concurrentPerKind: 1, queuedPerKind: 100))
        _ = pending(engine, "custom", "running-1")
        #expect(await eventually { slow.heldCount == 1 })
        let first = pending(engine, "custom", "shared-1")!
        let second = pending(engine, "custom", "shared-1")!
        // Both requests started at once (`Task.immediate`) and wait inside the engine, so a
        // cancellation reaches the engine before `cancel()` returns.
        first.cancel()
        #expect(engine.statistics().inFlight == 2, "the other request still waits for it")
        second.cancel()
        let dropped = await eventually { engine.statistics().inFlight == 1 }
        slow.release()
        try #require(dropped)
    }

    @Test func refreshesOfTokensInUseGoBeforeFirstFetchesInTheirLane() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider], limits: FetchLimits(concurrentPerKind: 1, queuedPerKind: 100))
        _ = await engine.get(kind: "vehicle", id: "in-use")
        provider.hold()
        _ = pending(engine, "vehicle", "blocker")
        #expect(await eventually { provider.heldCount == 1 })
        let firsts = (0..<5).compactMap { pending(engine, "vehicle", "first-\($0)") }
        // The token in use (read again just now) falls due for its refresh; it queues behind the
        // blocker, before the five first fetches.
        clock.advance(3000)
        #expect(token(await engine.get(kind: "vehicle", id: "in-use")) == "tok-in-use-1")
        #expect(engine.maintain() == 1)
        #expect(await eventually { engine.statistics().inFlight == 7 })
        provider.release()
        for task in firsts { _ = await task.value }
        #expect(await eventually { engine.statistics().inFlight == 0 })
        // Fetch order: in-use (1), blocker (2), then the refresh (3) before the five first fetches.
        #expect(token(await engine.get(kind: "vehicle", id: "in-use")) == "tok-in-use-3")
    }

    @Test func aReportThatCannotStartItsReplacementDoesNotUseUpTheWindow() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider], limits: FetchLimits(concurrentPerKind: 1, queuedPerUID: 1))
        let reported = token(await engine.get(kind: "vehicle", id: "k-1"))!
        provider.hold()
        _ = pending(engine, "vehicle", "blocker", uid: 7)
        #expect(await eventually { provider.heldCount == 1 })
        _ = pending(engine, "vehicle", "queued", uid: 7)
        // uid 7 has its one queued first fetch: its report is busy, and uses up nothing.
        let busy = engine.lookupRefresh(kind: "vehicle", id: "k-1", refusedToken: reported, requester: 7)
        #expect(failure(busy) == .busyForUID(7))
        guard
            case .pending(let wait) = engine.lookupRefresh(
                kind: "vehicle",
                id: "k-1",
                refusedToken: reported,
                requester: 8
            )
        else {
            Issue.record("another worker's report must start the replacement")
            provider.release()
            return
        }
        provider.release()
        #expect(token(await wait()) != reported)
    }

    @Test func oneUIDCannotFillItsKindsQueue() async {
        let slow = ScriptedProvider(clock: clock)
        slow.hold()
        let engine = engine(
            ["custom": slow],
            limits: FetchLimits(concurrentPerKind: 1, queuedPerKind: 100, queuedPerUID: 3)
        )
        let flooder: UInt32 = 1003
        var tasks = [pending(engine, "custom", "f-0", uid: flooder)!]
        #expect(await eventually { slow.heldCount == 1 }, "the first is at the provider, no longer queued")
        tasks += (1...3).compactMap { pending(engine, "custom", "f-\($0)", uid: flooder) }
        #expect(tasks.count == 4)
        #expect(
            failure(engine.lookup(kind: "custom", id: "f-4", minValidity: nil, requester: flooder))
                == .busyForUID(flooder)
        )
        if let other = pending(engine, "custom", "o-1", uid: 1004) { tasks.append(other) }
        #expect(tasks.count == 5, "another uid still gets a fetch")
        // Joining a fetch in flight is always allowed.
        if let joined = pending(engine, "custom", "f-1", uid: flooder) { tasks.append(joined) }
        #expect(tasks.count == 6)
        slow.release()
        for task in tasks { #expect(token(await task.value) != nil) }
        #expect(pending(engine, "custom", "f-5", uid: flooder) != nil, "places given back once the fetches got theirs")
    }
}

/// The entry bound shared fairly: a kind flooded with new ids evicts its own entries.
@Suite("Token store: eviction by kind")
struct KindEvictionTests {
    let clock = ManualClock()

    @Test func aFloodOfOneKindEvictsItsOwnEntriesNotAnothersTokens() async {
        let vehicle = ScriptedProvider(clock: clock)
        let trip = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": vehicle, "trip": trip], maxEntries: 100, clock: clock)
        for index in 0..<10 { _ = await engine.get(kind: "vehicle", id: "v-\(index)") }
        for index in 0..<500 { _ = await engine.get(kind: "trip", id: "t-\(index)") }
        #expect(engine.statistics().entries <= 100)
        #expect(engine.statistics().evictions >= 400)
        for index in 0..<10 {
            let info = (try? engine.info(kind: "vehicle", id: "v-\(index)").get()) ?? nil
            #expect(info?.fingerprint != nil, "vehicle v-\(index) is still cached")
        }
        #expect(vehicle.fetches == 10)
        for index in 0..<10 { _ = await engine.get(kind: "vehicle", id: "v-\(index)") }
        #expect(vehicle.fetches == 10, "served from the cache, not fetched again")
        // Two kinds under pressure share the bound.
        for index in 0..<300 { _ = await engine.get(kind: "vehicle", id: "w-\(index)") }
        let survey = Dictionary(uniqueKeysWithValues: engine.survey().map { ($0.kind, $0.entries) })
        #expect(abs((survey["vehicle"] ?? 0) - (survey["trip"] ?? 0)) <= 1, "\(survey)")
    }

    @Test func groupsKeepTheirOwnUseOrder() {
        var table = LRUTable<String, Int>()
        table.set("a", 1, capacity: .max, group: 0)
        table.set("x", 1, capacity: .max, group: 1)
        table.set("b", 2, capacity: .max, group: 0)
        table.set("y", 2, capacity: .max, group: 1)
        table.update("a") { $0 += 1 }
        #expect(table.evictionOrder(inGroup: 0) == ["b", "a"])
        #expect(table.evictionOrder(inGroup: 1) == ["x", "y"])
        #expect(table.count(inGroup: 1) == 2)
        #expect(table.largestGroup(preferring: 1) == 1)
        table.set("z", 3, capacity: .max, group: 1)
        #expect(table.largestGroup(preferring: 0) == 1)
        #expect(table.set("c", 3, capacity: 5, group: 0)?.key == "b", "capacity evicts within the group")
        #expect(table.oldestKey(inGroup: 1) == "x")
        table.remove("x")
        #expect(table.count(inGroup: 1) == 2)
        #expect(table.evictionOrder(inGroup: 1) == ["y", "z"])
    }
}
