import TestSupport
import Testing
import TokenAgent
import TokenAgentServer
import TokenWire

@Suite("Token engine")
struct TokenEngineTests {
    let clock = ManualClock()
    let provider: ScriptedProvider

    init() {
        provider = ScriptedProvider(clock: clock)
    }

    private func engine(maxEntries: Int = 100, random: Double = 0) -> TokenEngine {
        TokenEngine(
            providers: ["vehicle": provider, "trip": provider],
            policy: RefreshPolicy(refreshMargin: 600, minValidity: 300, idleTimeout: 600),
            maxEntries: maxEntries,
            clock: clock,
            random: { random }
        )
    }

    private func token(_ outcome: TokenEngine.Outcome) -> String? {
        if case .success(let served) = outcome { return served.token }
        return nil
    }

    private func errorCode(_ outcome: TokenEngine.Outcome) -> WireErrorCode? {
        if case .failure(let error) = outcome { return error.wireError.code }
        return nil
    }

    @Test func missThenHit() async {
        let engine = engine()
        let first = await engine.get(kind: "vehicle", id: "v-1")
        #expect(token(first) == "tok-v-1-1")
        if case .success(let served) = first { #expect(served.expiresAt == Int64(clock.wallSeconds) + 3600) }
        clock.advance(100)
        guard case .ready(let second) = engine.lookup(kind: "vehicle", id: "v-1", minValidity: nil) else {
            Issue.record("a cached token must be answered without waiting")
            return
        }
        #expect(token(second) == "tok-v-1-1")
        let stats = engine.statistics()
        #expect(stats.hits == 1)
        #expect(stats.misses == 1)
        #expect(stats.fetches == 1)
        #expect(provider.fetches == 1)
    }

    @Test func concurrentRequestsForOneColdKeyShareOneFetch() async {
        let engine = engine()
        provider.hold()
        let tokens = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<200 {
                group.addTask { self.token(await engine.get(kind: "vehicle", id: "cold")) }
            }
            #expect(await eventually { provider.heldCount == 1 })
            provider.release()
            return await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(tokens.count == 200)
        #expect(Set(tokens) == ["tok-cold-1"])
        #expect(provider.fetches == 1)
    }

    @Test func backgroundRefreshHappensBeforeExpiry() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(2999)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(engine.maintain() == 0)
        clock.advance(1)
        #expect(engine.maintain() == 1)
        #expect(await eventually { engine.statistics().inFlight == 0 && provider.fetches == 2 })
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
        #expect(engine.statistics().backgroundRefreshes == 1)
        #expect(engine.statistics().misses == 1, "the refreshed token was served without waiting")
    }

    @Test func jitterMovesTheRefreshEarlier() async {
        let engine = engine(random: 0.5)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(2849)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(engine.maintain() == 0)
        clock.advance(1)
        #expect(engine.maintain() == 1)
    }

    @Test func idleEntriesAreNotRefreshedAndDropOnceExpired() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(3000)
        #expect(engine.maintain() == 0, "not read within the idle time-out")
        #expect(engine.statistics().entries == 1)
        clock.advance(591)
        _ = engine.maintain()
        #expect(engine.statistics().entries == 0, "idle and under the serving floor")
        #expect(provider.fetches == 1)
    }

    @Test func getBelowMinValidityFetchesNow() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(3301)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
        #expect(provider.fetches == 2)
    }

    @Test func explicitMinValidityIsHonouredButRecentFetchesAreReused() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(10)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1", minValidity: 3595)) == "tok-v-1-2")
        clock.advance(1)
        #expect(
            token(await engine.get(kind: "vehicle", id: "v-1", minValidity: 3600)) == "tok-v-1-2",
            "a token fetched in the last 5 s is the best there is"
        )
        #expect(provider.fetches == 2)
    }

    @Test func providerDownKeepsServingCachedTokensButNeverExpiredOnes() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        provider.setMode(.fail(.failed("HTTP 503")))
        clock.advance(3400)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-1")
        #expect(engine.statistics().servedAfterFailure == 1)
        #expect(engine.statistics().fetchErrors == 1)
        clock.advance(189)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-1", "10 s or more left")
        clock.advance(2)
        let late = await engine.get(kind: "vehicle", id: "v-1")
        #expect(errorCode(late) == .unavailable, "under 10 s left is never served")
        clock.advance(100)
        #expect(errorCode(await engine.get(kind: "vehicle", id: "v-1")) == .unavailable)
    }

    @Test func failuresBackOffPerKey() async {
        let engine = engine(random: 0.999)
        provider.setMode(.fail(.failed("HTTP 500")))
        #expect(errorCode(await engine.get(kind: "vehicle", id: "v-1")) == .unavailable)
        #expect(errorCode(await engine.get(kind: "vehicle", id: "v-1")) == .unavailable)
        #expect(provider.fetches == 1, "in back-off the answer comes at once, without a fetch")
        #expect(errorCode(await engine.get(kind: "vehicle", id: "v-2")) == .unavailable)
        #expect(provider.fetches == 2, "back-off is per key")
        clock.advance(1)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(provider.fetches == 3)
        clock.advance(1)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(provider.fetches == 3, "second back-off step is up to 2 s")
        provider.setMode(.succeed(lifetime: 3600))
        clock.advance(1)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-4")
    }

    @Test func refusalsAreRememberedForFiveSeconds() async {
        let engine = engine(random: 0)
        provider.setMode(.fail(.rejected("HTTP 403")))
        let first = await engine.get(kind: "trip", id: "t-1")
        #expect(first == .failure(.rejected("HTTP 403")))
        clock.advance(4)
        #expect(errorCode(await engine.get(kind: "trip", id: "t-1")) == .rejected)
        #expect(provider.fetches == 1)
        provider.setMode(.succeed(lifetime: 3600))
        clock.advance(1.5)
        #expect(token(await engine.get(kind: "trip", id: "t-1")) == "tok-t-1-2")
    }

    @Test func capacityEvictsTheLeastRecentlyUsed() async {
        let engine = engine(maxEntries: 2)
        _ = await engine.get(kind: "vehicle", id: "a")
        _ = await engine.get(kind: "vehicle", id: "b")
        _ = await engine.get(kind: "vehicle", id: "a")
        _ = await engine.get(kind: "vehicle", id: "c")
        #expect(engine.statistics().entries == 2)
        _ = await engine.get(kind: "vehicle", id: "a")
        #expect(provider.fetches == 3, "a was used recently and stayed")
        _ = await engine.get(kind: "vehicle", id: "b")
        #expect(provider.fetches == 4, "b was evicted")
    }

    @Test func unknownKindIsABadKind() async {
        let engine = engine()
        #expect(errorCode(await engine.get(kind: "task", id: "x")) == .badKind)
        #expect(engine.drop(kind: "task", id: "x")?.wireError.code == .badKind)
        #expect(errorCode(await engine.awaitRefresh(kind: "task", id: "x")) == .badKind)
    }

    @Test func refreshFetchesUnlessFetchedInTheLastFiveSeconds() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(token(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) == "tok-v-1-1")
        clock.advance(5)
        #expect(token(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
        provider.setMode(.fail(.failed("down")))
        clock.advance(6)
        #expect(errorCode(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) == .unavailable)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2", "GET still serves the cached one")
    }

    /// Twenty REFRESHes past the guard while its fetch is held: one fetch, one token for all.
    /// One that comes after the fetch ended is within the guard (the clock does not move) and gets
    /// the same token, so the outcome holds however the tasks interleave.
    @Test func concurrentRefreshesPastTheGuardShareOneFetch() async throws {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(6)
        provider.hold()
        let tokens = try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<20 {
                group.addTask { [self] in token(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) }
            }
            #expect(await eventually { provider.heldCount == 1 }, "the fetch started")
            provider.release()
            return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
        }
        #expect(tokens == ["tok-v-1-2"])
        #expect(provider.fetches == 2, "twenty REFRESHes, one fetch")
        clock.advance(6)
        #expect(token(await engine.awaitRefresh(kind: "vehicle", id: "v-1")) == "tok-v-1-3", "past the guard again")
    }

    @Test func dropForgetsTheToken() async {
        let engine = engine()
        _ = await engine.get(kind: "vehicle", id: "v-1")
        #expect(engine.drop(kind: "vehicle", id: "v-1") == nil)
        #expect(engine.statistics().entries == 0)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2")
    }

    @Test func tokensThatExpireTooSoonAreProviderFailures() async {
        let engine = engine()
        provider.setMode(.expiresAt(clock.wallSeconds + 5))
        #expect(errorCode(await engine.get(kind: "vehicle", id: "v-1")) == .unavailable)
        #expect(engine.statistics().fetchErrors == 1)
    }

    @Test func shortLivedTokensStillCache() async {
        let engine = engine()
        provider.setMode(.succeed(lifetime: 120))
        _ = await engine.get(kind: "vehicle", id: "v-1")
        clock.advance(80)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-1", "40 s left >= 120/4")
        clock.advance(15)
        #expect(token(await engine.get(kind: "vehicle", id: "v-1")) == "tok-v-1-2", "25 s left < 30")
    }
}
