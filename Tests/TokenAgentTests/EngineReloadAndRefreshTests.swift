import TestSupport
import Testing
import TokenAgent
import TokenAgentServer
import TokenWire

@Suite("Token engine: reload generations, refused tokens, Retry-After")
struct EngineReloadAndRefreshTests {
    let clock = ManualClock()

    private func engine(_ providers: [String: any TokenProvider], random: Double = 0) -> TokenEngine {
        TokenEngine(providers: providers, clock: clock, random: { random })
    }

    private func token(_ outcome: TokenEngine.Outcome) -> String? {
        if case .success(let served) = outcome { return served.token }
        return nil
    }

    private func error(_ outcome: TokenEngine.Outcome) -> WireError? {
        if case .failure(let error) = outcome { return error.wireError }
        return nil
    }

    @Test func aFetchStartedOnTheOldProviderIsNotStoredAndItsWaitersGetTheNewOne() async {
        let old = ScriptedProvider(clock: clock, prefix: "old")
        let new = ScriptedProvider(clock: clock, prefix: "new")
        let engine = engine(["vehicle": old])
        old.hold()
        let waiters = Task {
            await withTaskGroup(of: String?.self) { group in
                for _ in 0..<20 { group.addTask { self.token(await engine.get(kind: "vehicle", id: "v-1")) } }
                return await group.reduce(into: [String?]()) { $0.append($1) }
            }
        }
        #expect(await eventually { old.heldCount == 1 })
        let before = engine.generation(of: "vehicle")
        engine.reconfigure(providers: ["vehicle": new], policy: RefreshPolicy(), changedKinds: ["vehicle"])
        #expect(engine.generation(of: "vehicle") != before)
        old.release()  // the old provider answers after the reload
        let tokens = await waiters.value
        #expect(Set(tokens) == ["new-v-1-1"], "waiters are answered by one fetch on the new provider")
        #expect(new.fetches == 1)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "new-v-1-1", "nothing old was stored")
    }

    @Test func aRetiredProviderShutsDownWhenItsLastFetchEnds() async {
        let old = ScriptedProvider(clock: clock, prefix: "old")
        let new = ScriptedProvider(clock: clock, prefix: "new")
        let kept = ScriptedProvider(clock: clock, prefix: "kept")
        let engine = engine(["vehicle": old, "trip": kept])
        old.hold()
        let waiter = Task { await engine.get(kind: "vehicle", id: "v-1") }
        #expect(await eventually { old.heldCount == 1 })
        engine.reconfigure(
            providers: ["vehicle": new, "trip": kept],
            policy: RefreshPolicy(),
            changedKinds: ["vehicle"]
        )
        #expect(engine.retiringProviders == 1)
        old.release()
        _ = await waiter.value
        #expect(await eventually { old.shutdowns == 1 && engine.retiringProviders == 0 })
        #expect(old.runningAtShutdowns == [0], "shut down once its fetch had ended, not while it ran")
        #expect(kept.shutdowns == 0 && new.shutdowns == 0)
    }

    @Test func aKindAReloadRemovesIsUnknownAndItsTokensAreGone() async {
        let vehicles = ScriptedProvider(clock: clock, prefix: "v")
        let trips = ScriptedProvider(clock: clock, prefix: "t")
        let engine = engine(["vehicle": vehicles, "trip": trips])
        #expect(token(await engine.get(kind: "trip", id: "t-1")) != nil)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) != nil)
        #expect(engine.statistics().entries == 2)
        engine.reconfigure(providers: ["vehicle": vehicles], policy: RefreshPolicy(), changedKinds: [])
        // The store decides a cached key without asking whether its kind is configured: the
        // reload must have forgotten the removed kind's entries for this to hold.
        #expect(error(await engine.get(kind: "trip", id: "t-1"))?.code == .badKind)
        #expect(engine.statistics().entries == 1)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) != nil, "the kept kind's token is served")
        #expect(vehicles.fetches == 1 && trips.fetches == 1)
    }

    @Test func aReloadThatKeepsTheProviderKeepsTokensAndGeneration() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        let first = token(await engine.get(kind: "vehicle", id: "v-1"))
        let generation = engine.generation(of: "vehicle")
        engine.reconfigure(providers: ["vehicle": provider], policy: RefreshPolicy(), changedKinds: [])
        #expect(engine.generation(of: "vehicle") == generation)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == first)
        #expect(provider.fetches == 1)
        #expect(provider.shutdowns == 0)
    }

    @Test func aHundredWorkersRefusedOneTokenCauseOneFetchAndNeverGetItBack() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        let refused = token(await engine.get(kind: "vehicle", id: "v-1"))!
        provider.hold()
        let replies = Task {
            await withTaskGroup(of: String?.self) { group in
                for _ in 0..<100 {
                    group.addTask {
                        self.token(await engine.awaitRefresh(kind: "vehicle", id: "v-1", refusedToken: refused))
                    }
                }
                return await group.reduce(into: [String?]()) { $0.append($1) }
            }
        }
        #expect(await eventually { provider.heldCount == 1 })
        // Meanwhile a GET still gets the reported token: a report never empties the key.
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == refused)
        provider.release()
        #expect(Set(await replies.value) == ["tok-v-1-2"])
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2", "replaced once it came")
        #expect(provider.fetches == 2, "one fetch for all hundred, within the re-fetch guard")
        // A late worker refused the same old token gets the newer one at once, without a fetch.
        guard case .ready(let late) = engine.lookupRefresh(kind: "vehicle", id: "v-1", refusedToken: refused) else {
            Issue.record("a newer cached token must be answered at once")
            return
        }
        #expect(token(late) == "tok-v-1-2")
        #expect(provider.fetches == 2)
    }

    @Test func aReportWhileTheProviderThrottlesLeavesTheTokenToEveryoneElse() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        let reported = token(await engine.get(kind: "vehicle", id: "shared-1"))!
        provider.setMode(.fail(.throttled("HTTP 429", retryAfter: 300)))
        let refresh = await engine.awaitRefresh(kind: "vehicle", id: "shared-1", refusedToken: reported)
        #expect(error(refresh)?.message.contains("retry after 300 s") == true, "the reporter is told")
        #expect(token(await engine.get(kind: "vehicle", id: "shared-1")) == reported, "everyone else still gets it")
        let again = await engine.awaitRefresh(kind: "vehicle", id: "shared-1", refusedToken: reported)
        #expect(error(again)?.message.hasPrefix("provider failing; next try in") == true, "no fetch while it holds")
        #expect(token(await engine.get(kind: "vehicle", id: "shared-1")) == reported)
        #expect(provider.fetches == 2)
    }

    @Test func reportsFetchAReplacementAtMostOncePerGuardWindow() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        let first = token(await engine.get(kind: "vehicle", id: "loop-1"))!
        let second = token(await engine.awaitRefresh(kind: "vehicle", id: "loop-1", refusedToken: first))
        #expect(second == "tok-v-1-2".replacingOccurrences(of: "v-1", with: "loop-1"))
        // Reported again within the window: no fetch; the reporter is told when, others keep it.
        clock.advance(4)
        let again = await engine.awaitRefresh(kind: "vehicle", id: "loop-1", refusedToken: second!)
        #expect(error(again)?.message == "a replacement for the refused token was fetched moments ago; next try in 1 s")
        #expect(token(await engine.get(kind: "vehicle", id: "loop-1")) == second)
        #expect(provider.fetches == 2)
        clock.advance(1)
        let third = token(await engine.awaitRefresh(kind: "vehicle", id: "loop-1", refusedToken: second!))
        #expect(third != nil && third != second, "a new window, a new replacement")
        #expect(provider.fetches == 3)
        // The issue's loop: GET, then REFRESH with the token just got, 100 times over 10 s.
        for _ in 0..<100 {
            let current = token(await engine.get(kind: "vehicle", id: "loop-1"))!
            #expect(token(await engine.awaitRefresh(kind: "vehicle", id: "loop-1", refusedToken: current)) != current)
            clock.advance(0.1)
        }
        #expect(provider.fetches <= 6, "one replacement per 5 s window: \(provider.fetches) fetches")
    }

    @Test func aPlainRefreshStillKeepsTheGuard() async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        let first = token(await engine.get(kind: "vehicle", id: "v-1"))
        #expect(token(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) == first)
        #expect(provider.fetches == 1)
    }

    @Test func aProviderHandingBackTheRefusedTokenIsAnError() async {
        // Scripted providers number their tokens: a second one mints the same text again.
        let same = ScriptedProvider(clock: clock, prefix: "tok")
        let engine = engine(["vehicle": same])
        let refused = token(await engine.get(kind: "vehicle", id: "v-1"))!
        #expect(refused == "tok-v-1-1")
        let again = ScriptedProvider(clock: clock, prefix: "tok")
        engine.reconfigure(providers: ["vehicle": again], policy: RefreshPolicy(), changedKinds: [])
        let outcome = await engine.awaitRefresh(kind: "vehicle", id: "v-1", refusedToken: refused)
        #expect(error(outcome)?.code == .unavailable)
        #expect(token(outcome) == nil)
    }

    @Test(arguments: [(120.0, 120.0), (10_000.0, 300.0)])
    func retryAfterIsTheBackOffFloorCappedAt300Seconds(retryAfter: Double, expected: Double) async {
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(["vehicle": provider])
        provider.setMode(.fail(.throttled("HTTP 429", retryAfter: retryAfter)))
        let first = await engine.get(kind: "vehicle", id: "v-1")
        #expect(error(first)?.message.contains("retry after") == true)
        provider.setMode(.succeed(lifetime: 3600))
        clock.advance(expected - 1)
        let held = await engine.get(kind: "vehicle", id: "v-1")
        #expect(error(held)?.message == "provider failing; next try in 1 s")
        #expect(provider.fetches == 1)
        clock.advance(1)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
    }
}
