import Dispatch
import Logging
import Synchronization
import TestSupport
import Testing
import TokenWire

@testable import TokenAgent

/// Requests racing a fetch's end: one that decided to fetch just before the fetch in flight
/// recorded its token must take that token, not start a second fetch.
@Suite("Singleflight at a fetch's end")
struct SingleflightRaceTests {
    @Test func requestsRacingAFetchsEndNeverFetchAgain() async {
        let clock = ManualClock()  // frozen: every token is within the re-fetch guard
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(
            providers: ["vehicle": provider],
            policy: RefreshPolicy(refreshMargin: 600, minValidity: 300, idleTimeout: 600),
            maxEntries: 10_000,
            clock: clock,
            random: { 0 }
        )
        let rounds = 2_000
        for round in 0..<rounds {
            let id = "race-\(round)"
            // Cold REFRESHes and GETs of one key at once: the provider answers at once, so
            // later ones keep arriving while the first fetch ends.
            await withTaskGroup(of: Void.self) { group in
                for index in 0..<8 {
                    group.addTask {
                        if index % 2 == 0 {
                            _ = await engine.awaitRefresh(kind: "vehicle", id: id)
                        } else {
                            _ = await engine.get(kind: "vehicle", id: id)
                        }
                    }
                }
            }
        }
        #expect(provider.fetches == rounds, "one fetch a key: \(provider.fetches) for \(rounds) keys")
        await engine.shutdown()
    }
}

/// The same race made to happen every time: the fetch in flight ends in the window between the
/// request's miss and its joining a flight.
@Suite("A fetch ending while a request that missed goes to join it")
struct FetchEndingBeforeJoinTests {
    @Test func theRequestTakesTheRecordedTokenAndStartsNoFetch() async throws {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let flightEnded = DispatchSemaphore(value: 0)
        let windowsOpened = Mutex(0)
        let engine = TokenEngine(
            providers: ["vehicle": provider],
            policy: RefreshPolicy(refreshMargin: 600, minValidity: 300, idleTimeout: 600),
            maxEntries: 100,
            fetchLimits: FetchLimits(),
            clock: clock,
            random: { 0 },
            storage: nil,
            logger: Logger(label: "test"),
            metrics: EngineMetrics(),
            beforeJoiningAFlight: { _ in
                // The second request's window only (the first GET starts the fetch through it
                // too): let the fetch end, and go on once it has recorded its token.
                let window = windowsOpened.withLock { count in
                    count += 1
                    return count
                }
                guard window == 2 else { return }
                provider.release()
                _ = flightEnded.wait(timeout: .now() + hangLimit)
            }
        )
        provider.hold()
        let first = Task { await engine.get(kind: "vehicle", id: "v-1") }
        try #require(await eventually { provider.heldCount == 1 }, "the first GET's fetch reached the provider")

        // The second GET runs on a thread of its own: it blocks in the window.
        let second = await withCheckedContinuation { (done: CheckedContinuation<TokenEngine.Lookup, Never>) in
            DetachedThread.start { done.resume(returning: engine.lookup(kind: "vehicle", id: "v-1", minValidity: nil)) }
            Task {
                // The first GET returns once its flight has recorded the token and ended.
                _ = await first.value
                flightEnded.signal()
            }
        }

        guard case .ready(.success(let served)) = second else {
            Issue.record("the second GET did not take the recorded token at once: \(second)")
            await engine.shutdown()
            return
        }
        #expect(served.token == "tok-v-1-1")
        #expect(provider.fetches == 1, "a second fetch started: \(provider.fetches) fetches")
        #expect(windowsOpened.withLock { $0 } == 2)
        await engine.shutdown()
    }
}
