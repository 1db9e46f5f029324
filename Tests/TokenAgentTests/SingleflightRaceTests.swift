import Testing
import TokenAgent

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
