import Foundation
import Logging
import Synchronization
import Testing

@testable import TokenAgent

/// Mints `tok-<id>-<n>` for an hour, `n` counting this provider's fetches, so a refetch shows.
private final class CountingProvider: TokenProvider {
    private let fetched = Mutex(0)
    var summary: String { "counting" }
    var fetches: Int { fetched.withLock { $0 } }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        let count = fetched.withLock { count in
            count += 1
            return count
        }
        return FetchedToken(token: "tok-\(key.id)-\(count)", expiresAtUnixSeconds: Date().timeIntervalSince1970 + 3600)
    }
}

/// The engine over the real segments: its tokens live only in the segments, and every one comes
/// back, the one it was handed, through growth, rotation and a limit.
@Suite("Engine over the real segments")
struct EngineOverSegmentsTests {
    /// Two ids Swift's `String ==` calls equal (a precomposed é, and e with a combining accent):
    /// for the agent, the provider and Fleet Engine they are two ids.
    static let composed = "caf\u{E9}"
    static let decomposed = "cafe\u{301}"

    private func makeEngine(limits: SharedSegments.Limits) -> (TokenEngine, SharedSegments, CountingProvider) {
        let provider = CountingProvider()
        let segments = SharedSegments(
            kinds: ["vehicle"],
            policy: RefreshPolicy(),
            limits: limits,
            logger: Logger(label: "test")
        )
        let engine = TokenEngine(providers: ["vehicle": provider], storage: segments)
        return (engine, segments, provider)
    }

    @Test func idsSwiftCallsEqualKeepTheirOwnTokensThroughGrowthAndRotation() async throws {
        #expect(Self.composed == Self.decomposed, "the premise: String == equates them")
        var limits = SharedSegments.Limits()
        limits.initialSlots = 64
        limits.rotationInterval = 0  // every beat makes a new generation
        let (engine, segments, provider) = makeEngine(limits: limits)
        defer { segments.retireAll() }
        let composed = try await engine.get(kind: "vehicle", id: Self.composed).get().token
        let decomposed = try await engine.get(kind: "vehicle", id: Self.decomposed).get().token
        #expect(composed.utf8.elementsEqual("tok-\(Self.composed)-1".utf8))
        #expect(decomposed.utf8.elementsEqual("tok-\(Self.decomposed)-2".utf8))
        // Enough keys to grow the tables several times, then rotations.
        for index in 0..<300 { _ = try await engine.get(kind: "vehicle", id: "v-\(index)").get() }
        for _ in 0..<3 { segments.beat() }
        #expect(segments.statistics().generations > 5)
        #expect(segments.statistics().slotsUsed == 302, "one copy of each, in the segment")
        let again = try await engine.get(kind: "vehicle", id: Self.composed).get().token
        let againDecomposed = try await engine.get(kind: "vehicle", id: Self.decomposed).get().token
        #expect(again.utf8.elementsEqual(composed.utf8), "its own token, not the other id's")
        #expect(againDecomposed.utf8.elementsEqual(decomposed.utf8))
        for index in 0..<300 {
            #expect(try await engine.get(kind: "vehicle", id: "v-\(index)").get().token.hasPrefix("tok-v-\(index)-"))
        }
        #expect(provider.fetches == 302, "every read after the first came from the segment")
        // Dropping one of the two leaves the other.
        _ = engine.drop(kind: "vehicle", id: Self.composed)
        #expect(
            try await engine.get(kind: "vehicle", id: Self.decomposed).get().token.utf8.elementsEqual(decomposed.utf8)
        )
        #expect(provider.fetches == 302)
    }

    @Test func tokensKeptThroughALimitAreServedWithoutARefetch() async throws {
        var limits = SharedSegments.Limits()
        limits.maxGenerationsPerMinute = 1
        limits.generationWindow = 3600  // no second generation in this test
        let (engine, segments, provider) = makeEngine(limits: limits)
        defer { segments.retireAll() }
        for id in [Self.composed, Self.decomposed, "v-1"] { _ = try await engine.get(kind: "vehicle", id: id).get() }
        // Two changes of rules: the first uses the window's one generation, the second finds the
        // limit and leaves the kind without a segment; the tokens stay the agent's.
        segments.reconfigure(kinds: ["vehicle"], policy: RefreshPolicy(), rulesChanged: ["vehicle"])
        segments.reconfigure(kinds: ["vehicle"], policy: RefreshPolicy(), rulesChanged: ["vehicle"])
        #expect(segments.statistics().segments == 0)
        #expect(segments.statistics().heldOutside == 3)
        let composed = try await engine.get(kind: "vehicle", id: Self.composed).get().token
        let decomposed = try await engine.get(kind: "vehicle", id: Self.decomposed).get().token
        #expect(composed.utf8.elementsEqual("tok-\(Self.composed)-1".utf8))
        #expect(decomposed.utf8.elementsEqual("tok-\(Self.decomposed)-2".utf8))
        #expect(provider.fetches == 3)
        _ = engine.drop(kind: "vehicle", id: Self.decomposed)
        #expect(segments.statistics().heldOutside == 2, "only the dropped id left")
        #expect(try await engine.get(kind: "vehicle", id: Self.composed).get().token.utf8.elementsEqual(composed.utf8))
    }

    /// A cache taken over at start (20,000 tokens at once, under a limit that leaves a kind's
    /// retired generations a small share) goes into its segment whole, in one growth: grown one
    /// token at a time, the retired generations outrun the share and the rest is left out.
    @Test func aTakenOverCacheGoesIntoItsSegmentWhole() async throws {
        var limits = SharedSegments.Limits()
        limits.maxTotalBytes = 64 << 20  // five kinds: a share of 6.4 MiB for each one's retired generations
        let segments = SharedSegments(
            kinds: ["vehicle", "trip", "task", "delivery-vehicle", "tracking"],
            policy: RefreshPolicy(),
            limits: limits,
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        let engine = TokenEngine(providers: ["vehicle": CountingProvider()], maxEntries: 30_000, storage: segments)
        let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
        let padding = String(repeating: "x", count: 680)
        let tokens = (0..<20_000).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "t-\($0)-\(padding)", expiresAt: expiresAt)
        }
        let before = segments.statistics().generations
        #expect(engine.importTokens(tokens, from: .memory) == 20_000)
        let statistics = segments.statistics()
        #expect(statistics.notMirrored == 0, "every token in the segment")
        #expect(statistics.slotsUsed == 20_000)
        #expect(statistics.generations == before + 1, "one growth")
        guard case .ready(.success(let served)) = engine.lookup(kind: "vehicle", id: "v-19999", minValidity: nil) else {
            Issue.record("v-19999 is served")
            return
        }
        #expect(served.token == "t-19999-\(padding)")
    }
}
