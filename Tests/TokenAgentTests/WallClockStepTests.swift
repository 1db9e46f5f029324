import TestSupport
import Testing

@testable import TokenAgent

@Suite("A step of the wall clock")
struct WallClockStepTests {
    private func makeEngine(storage: RecordingStorage? = nil) -> (TokenEngine, ScriptedProvider, ManualClock) {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider], clock: clock, random: { 0 }, storage: storage)
        return (engine, provider, clock)
    }

    /// A host whose clock was behind fetches a token; NTP steps the clock forward: the token's
    /// `exp` has now passed by the wall clock while its monotonic deadline has an hour to go. It
    /// is not served; a new one is fetched.
    @Test func aTokenExpiredByTheSteppedWallClockIsNotServed() async throws {
        let (engine, provider, clock) = makeEngine()
        let first = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(first.token == "tok-v-1-1")
        clock.stepWall(3_600 + 120)  // exp was 120 s ago by the corrected clock
        let second = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(second.token == "tok-v-1-2", "the old token is expired by the wall clock")
        #expect(Double(second.expiresAt) > clock.wallSeconds + 3_000)
        #expect(provider.fetches == 2)
    }

    /// Under the serving floor by the wall clock is as good as expired, for a GET and for a
    /// failed fetch's fallback alike.
    @Test func aTokenUnderTheFloorByTheWallClockIsNeitherServedNorAFallback() async throws {
        let (engine, provider, clock) = makeEngine()
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        clock.stepWall(3_600 - 5)  // 5 s left by the wall clock, under the 10 s floor
        provider.setMode(.fail(.failed("down")))
        let outcome = await engine.get(kind: "vehicle", id: "v-1")
        #expect(throws: (any Error).self, "no token with under 10 s left by the wall clock") { try outcome.get() }
    }

    /// The scheduler's move keeps a token's lifetime as issued (as if fetched that much earlier),
    /// so a GET still needs the default minimum validity (300 s), not a quarter of what the step
    /// left (200 s / 4), and shared memory's readers judge it the same way.
    @Test func aMovedTokenKeepsItsLifetime() async throws {
        let (engine, provider, clock) = makeEngine()
        _ = engine.maintain()
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        provider.hold()  // the refresh the move makes due waits, so the moved entry is what INFO sees
        clock.stepWall(3_600 - 200)
        _ = engine.maintain()
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        let fetched = try #require(info.fetchedAt)
        let expires = try #require(info.expiresAt)
        #expect(expires - fetched == 3_600, "the lifetime as issued")
        #expect(expires.seconds - clock.wallSeconds == 200)
        provider.release()
    }

    /// A step back never makes a token last longer than its monotonic deadline.
    @Test func aStepBackDoesNotExtendAToken() async throws {
        let (engine, _, clock) = makeEngine()
        let first = try await engine.get(kind: "vehicle", id: "v-1").get()
        clock.stepWall(-7_200)
        clock.advance(3_600 - 5)  // 5 s left on the monotonic clock; hours by the wall clock
        let second = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(second.token != first.token)
    }

    /// The scheduler's pass notices the step: every held token whose `exp` now comes sooner gets
    /// that deadline, in shared memory too (readers judge by it), and a step back moves nothing.
    @Test func theSchedulerMovesDeadlinesAndSharedMemoryToTheSteppedClock() async throws {
        let storage = RecordingStorage()
        let (engine, provider, clock) = makeEngine(storage: storage)
        _ = engine.maintain()  // the watch's first look
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        _ = try await engine.get(kind: "vehicle", id: "v-2").get()
        let before = try #require(storage.expiry("vehicle", "v-1"))
        #expect(before == engine.now + 3_600)

        clock.stepWall(-600)
        _ = engine.maintain()
        #expect(storage.expiry("vehicle", "v-1") == before, "a step back moves no deadline")

        clock.stepWall(600 + 1_800)  // net: the wall clock is 30 minutes ahead of where it was
        _ = engine.maintain()
        #expect(storage.expiry("vehicle", "v-1") == engine.now + 1_800, "shared memory has the sooner deadline")
        #expect(storage.expiry("vehicle", "v-2") == engine.now + 1_800)
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        #expect(info.expiresAt == UnixTime(seconds: clock.wallSeconds + 1_800))

        // A step past the `exp`: the pass takes the tokens out of shared memory and refreshes them.
        clock.stepWall(1_800)
        _ = engine.maintain()
        #expect(storage.token("vehicle", "v-1") != "tok-v-1-1", "the expired token left shared memory")
        try await waitUntil { provider.fetches == 4 }
        let fresh = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(fresh.token != "tok-v-1-1" && fresh.token.hasPrefix("tok-v-1-"), "refreshed: \(fresh.token)")
        #expect(Double(fresh.expiresAt) > clock.wallSeconds + 3_000)
    }
}

/// Waits (yielding) until `condition` holds; a minute only catches a hang.
private func waitUntil(_ condition: @Sendable () -> Bool) async throws {
    #expect(await eventually(condition))
}

/// The machine's own clocks, as the engine reads them.
@Suite("The system clock")
struct SystemAgentClockTests {
    /// The coarse wall clock the engine judges `exp` by is the fine one at the kernel's last tick:
    /// it moves in ticks (a thousand readings in a row see a handful of values, where the fine
    /// clock's are all different), it is never ahead of a fine reading taken after it, and it
    /// trails one taken before it by at most a tick (10 ms at the lowest rate, 100 Hz; more only
    /// if the thread is preempted between the readings, allowed for by asking it of most rounds).
    @Test func theCoarseWallClockTrailsTheFineOneByAtMostATick() {
        let clock = SystemAgentClock()
        var within = 0
        for _ in 0..<1_000 {
            let before = clock.wallSeconds
            let coarse = clock.coarseWallSeconds
            let after = clock.wallSeconds
            #expect(coarse <= after, "the coarse clock is never ahead of a later fine reading")
            if coarse >= before - 0.010 { within += 1 }
        }
        #expect(within >= 900, "\(within) of 1,000 coarse readings within 10 ms of the fine clock")
        #expect(Set((0..<1_000).map { _ in clock.coarseWallSeconds }).count < 100, "it moves in ticks")
        #expect(Set((0..<1_000).map { _ in clock.wallSeconds }).count > 100, "the fine clock does not")
    }

    /// The engine over the machine's clocks judges `exp` by that coarse reading: its `unixNow`
    /// moves in ticks, and is never ahead of the fine wall clock read after it.
    @Test func theEngineReadsTheCoarseWallClock() {
        let engine = TokenEngine(providers: [:])
        #expect(Set((0..<1_000).map { _ in engine.unixNow.seconds }).count < 100, "it moves in ticks")
        let unixNow = engine.unixNow.seconds
        let fine = SystemAgentClock().wallSeconds
        #expect(unixNow <= fine)
        #expect(fine - unixNow < 1, "a tick behind, not a step")
    }
}

@Suite("Unix time")
struct UnixTimeTests {
    /// Whole seconds are the time rounded down, clamped to Int64's range: truncation where they
    /// agree (every time since the epoch), rounding where they do not.
    @Test func wholeSecondsRoundDownEverywhere() {
        let cases: [(Double, Int64)] = [
            (0, 0), (0.999, 0), (1, 1), (1_900_000_000.75, 1_900_000_000), (9.1e18, 9_100_000_000_000_000_000),
            (-0.25, -1), (-1, -1), (-1.5, -2), (-1_000.000_1, -1_001),
            (9.3e18, .max), (.infinity, .max), (-.infinity, .min), (.nan, 0),
        ]
        for (seconds, whole) in cases {
            #expect(UnixTime(seconds: seconds).wholeSeconds == whole, "\(seconds)")
        }
    }
}
