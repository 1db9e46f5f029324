import Testing
import TokenAgent
import TokenAgentServer

/// What the engine tells about itself for metrics, INFO and health, on a clock the test moves.
@Suite("Engine observability")
struct EngineObservabilityTests {
    private func engine(_ clock: ManualClock, _ provider: ScriptedProvider) -> TokenEngine {
        TokenEngine(providers: ["vehicle": provider], clock: clock)
    }

    @Test func failureReasonsFollowTheProvidersTexts() {
        let cases: [(ProviderError, FetchFailureReason)] = [
            (.failed("request failed: Connect timeout"), .timeout),
            (.failed("request failed: Deadline exceeded"), .timeout),
            (.failed("HTTP 408"), .timeout),
            (.failed("request failed: Connection refused"), .refused),
            (.failed("HTTP 500"), .status5xx),
            (.throttled("HTTP 503", retryAfter: 5), .status5xx),
            (.throttled("HTTP 429", retryAfter: 5), .status429),
            (.failed("HTTP 429"), .status429),
            (.rejected("HTTP 403"), .status4xx),
            (.failed("HTTP 302 redirect, not followed"), .badBody),
            (.failed("reply is not valid JSON"), .badBody),
            (.failed("reply body over 64 KiB"), .badBody),
            (.failed("no expiry in the reply and the token has no exp"), .badBody),
            (.rejected("token's vehicleid claim names another id"), .claimMismatch),
            (.failed("token is already expired"), .expired),
            (.failed("token expires in under 10 s"), .expired),
            (.failed("signing failed"), .other),
        ]
        for (error, reason) in cases { #expect(FetchFailureReason(error) == reason, "\(error)") }
    }

    @Test func providerHealthCountsARunOfFailuresUntilASuccess() async {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(clock, provider)
        provider.setMode(.fail(.failed("HTTP 503")))
        _ = await engine.get(kind: "vehicle", id: "a")
        clock.advance(30)
        _ = await engine.get(kind: "vehicle", id: "b")
        var health = engine.providerHealth()[0]
        #expect(health.failingFor(now: clock.now, forgetAfter: 600) == 30)
        #expect(health.consecutiveFailures == 2)
        #expect(health.lastFailureReason == .status5xx)
        #expect(health.failingFor(now: clock.now + 601, forgetAfter: 600) == nil, "nothing new for the idle time")
        let report = AgentHealth(settings: HealthSettings(degradedAfter: 30)).report(
            engine: engine,
            providers: engine.providerHealth(),
            survey: engine.survey()
        )
        #expect(report.problems.map(\.kind) == ["vehicle"])
        let status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            health: AgentHealth(settings: HealthSettings(degradedAfter: 30)),
            clock: clock
        )
        #expect(
            status.summary().hasPrefix("degraded: vehicle: provider failing for 30 s (provider failed: HTTP 503); "),
            "systemd's STATUS line names the kind: \(status.summary())"
        )
        #expect(report.summary.contains("vehicle: provider failing for 30 s (provider failed: HTTP 503)"))
        let calm = AgentHealth(settings: HealthSettings(degradedAfter: 31)).report(
            engine: engine,
            providers: engine.providerHealth(),
            survey: engine.survey()
        )
        #expect(!calm.isDegraded)
        provider.setMode(.succeed(lifetime: 3600))
        _ = await engine.get(kind: "vehicle", id: "c")
        health = engine.providerHealth()[0]
        #expect(health.failingSince == nil)
        #expect(health.lastFailure == "provider failed: HTTP 503", "the last error stays known")
        // A refusal of one id is not the provider failing.
        provider.setMode(.fail(.rejected("HTTP 404")))
        _ = await engine.get(kind: "vehicle", id: "d")
        #expect(engine.providerHealth()[0].failingSince == nil)
        #expect(engine.providerHealth()[0].lastFailureReason == .status4xx)
    }

    @Test func surveyCountsEachKindOverEveryShard() async {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider, "trip": provider], clock: clock)
        _ = await engine.get(kind: "trip", id: "first")
        clock.advance(100)
        for index in 0..<200 { _ = await engine.get(kind: "vehicle", id: "v-\(index)") }
        for index in 0..<37 { _ = await engine.get(kind: "trip", id: "t-\(index)") }
        let surveys = engine.survey()
        #expect(surveys.map(\.kind) == engine.kinds)
        let trip = surveys.first { $0.kind == "trip" }
        let vehicle = surveys.first { $0.kind == "vehicle" }
        #expect(vehicle?.entries == 200 && vehicle?.tokens == 200 && vehicle?.activeTokens == 200)
        #expect(vehicle?.soonestActiveExpiry == 3600)
        #expect(trip?.entries == 38 && trip?.tokens == 38)
        #expect(trip?.soonestActiveExpiry == 3500, "the oldest trip token, whichever shard holds it")
    }

    @Test func surveyAndHealthSeeTokensInUseCloseToExpiry() async {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(clock, provider)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        _ = await engine.get(kind: "vehicle", id: "v-2")
        var survey = engine.survey()[0]
        #expect(survey.entries == 2 && survey.activeTokens == 2)
        #expect(survey.soonestActiveExpiry == 3600)
        #expect(survey.activeBelowMinimumValidity == 0)
        // The provider fails from now on; v-1 keeps being read, v-2 is not.
        provider.setMode(.fail(.failed("HTTP 503")))
        clock.advance(601)
        survey = engine.survey()[0]
        #expect(survey.activeTokens == 0, "neither was read within the idle time-out")
        clock.advance(2750)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        survey = engine.survey()[0]
        #expect(survey.activeTokens == 1)
        #expect(survey.soonestActiveExpiry == 249)
        #expect(survey.activeBelowMinimumValidity == 1, "249 s left, a default GET wants 300")
        let report = AgentHealth(settings: HealthSettings(degradedAfter: 86_400)).report(
            engine: engine,
            providers: engine.providerHealth(),
            survey: engine.survey()
        )
        #expect(report.problems.map(\.reason) == [.expirySoon])
        #expect(report.problems.first?.kind == "vehicle")
    }

    @Test func infoTellsAboutAKeyWithoutItsToken() async throws {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = engine(clock, provider)
        #expect(try engine.info(kind: "vehicle", id: "v-1").get() == nil)
        #expect(throws: EngineFailure.self) { try engine.info(kind: "lorry", id: "x").get() }
        let served = try await engine.get(kind: "vehicle", id: "v-1").get()
        clock.advance(10)
        _ = await engine.get(kind: "vehicle", id: "v-1")
        _ = await engine.get(kind: "vehicle", id: "v-1")
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        #expect(info.fingerprint == TokenFingerprint.of(served.token))
        #expect(info.readsSinceFetch == 2)
        #expect(info.expiresAt?.wholeSeconds == served.expiresAt)
        #expect(info.fetchedAt?.seconds == clock.wallSeconds - 10)
        #expect(info.nextRefresh.map { $0.seconds > clock.wallSeconds } == true)
        #expect(info.lastError == nil)
        #expect(try engine.info(kind: "vehicle", id: "v-1").get()?.readsSinceFetch == 2, "INFO is not a read")
        provider.setMode(.fail(.failed("HTTP 502")))
        _ = await engine.awaitRefresh(kind: "vehicle", id: "v-1")
        clock.advance(6)
        _ = await engine.awaitRefresh(kind: "vehicle", id: "v-1")
        let failed = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        #expect(failed.lastErrorReason == .status5xx)
        #expect(failed.lastError == "provider failed: HTTP 502")
        #expect(failed.fingerprint == info.fingerprint, "the cached token stays")
    }
}
