import TestSupport
import Testing
import TokenWire

@testable import TokenAgent

@Suite("Token store: keys, shards and the due queue")
struct TokenStoreTests {
    @Test func aBorrowedKeyFindsTheOwnedOne() {
        for id in ["v-1", "a-much-longer-vehicle-id-0123456789abcdef", "véhicule-ü", String(repeating: "x", count: 64)]
        {
            let owned = EntryKey(kind: "vehicle", id: id)
            var bytes = Array(id.utf8)
            bytes.withUnsafeMutableBytes { raw in
                let borrowed = EntryKey(kind: "vehicle", borrowing: UnsafeRawBufferPointer(raw))
                #expect(borrowed == owned)
                #expect(borrowed.hashValue == owned.hashValue)
                #expect(borrowed.tokenKey == TokenKey(kind: "vehicle", id: id))
                #expect(EntryKey(kind: "trip", borrowing: UnsafeRawBufferPointer(raw)) != owned)
            }
        }
        #expect(EntryKey(kind: "vehicle", id: "v-1") != EntryKey(kind: "vehicle", id: "v-10"))
    }

    /// Every pairing of the two forms compares the ids' bytes: equal bytes are one key, bytes of
    /// the same length that differ are not, and neither are canonically equivalent texts.
    @Test func keysCompareByBytesInEveryForm() {
        let precomposed = "v\u{E9}", decomposed = "ve\u{301}"
        #expect(precomposed == decomposed)  // String's `==`; the keys must differ
        let pairs: [(String, String, Bool)] = [
            ("v-1", "v-1", true), ("v-1", "v-2", false), ("v-1", "v-10", false), ("", "", true),
            (precomposed, decomposed, false), (precomposed, precomposed, true),
            (String(repeating: "x", count: 64), String(repeating: "x", count: 64), true),
        ]
        for (left, right, same) in pairs {
            var leftBytes = Array(left.utf8), rightBytes = Array(right.utf8)
            leftBytes.withUnsafeMutableBytes { leftRaw in
                rightBytes.withUnsafeMutableBytes { rightRaw in
                    let lefts = [
                        EntryKey(kind: "vehicle", id: left), EntryKey(kind: "vehicle", borrowing: .init(leftRaw)),
                    ]
                    let rights = [
                        EntryKey(kind: "vehicle", id: right), EntryKey(kind: "vehicle", borrowing: .init(rightRaw)),
                    ]
                    for leftKey in lefts {
                        for rightKey in rights {
                            #expect((leftKey == rightKey) == same, "\(left) \(right)")
                            #expect((rightKey == leftKey) == same, "\(right) \(left)")
                        }
                        #expect(leftKey != EntryKey(kind: "trip", id: left))
                    }
                }
            }
        }
    }

    @Test func theDueQueuePopsOnlyWhatIsDueInOrder() {
        var generator = SeededGenerator(seed: 7)
        var queue = DueQueue()
        var instants: [Double] = []
        for slot in 0..<500 {
            let at = Double.random(in: 0..<1000, using: &generator)
            instants.append(at)
            queue.push(MonotonicInstant(seconds: at), slot: slot)
        }
        var popped: [Double] = []
        while let record = queue.popDue(at: MonotonicInstant(seconds: 500)) { popped.append(record.at.seconds) }
        #expect(popped == instants.filter { $0 <= 500 }.sorted())
        #expect(queue.count == instants.filter { $0 > 500 }.count)
        while let record = queue.popDue(at: MonotonicInstant(seconds: 1000)) { popped.append(record.at.seconds) }
        #expect(popped == instants.sorted())
    }

    @Test func aSchedulerPassLooksOnlyAtWhatIsDue() async {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider], clock: clock, random: { 0 })
        for index in 0..<1000 { _ = await engine.get(kind: "vehicle", id: "v-\(index)") }
        #expect(engine.statistics().scheduled == 1000, "one record per entry")
        for _ in 0..<50 {
            clock.advance(10)
            #expect(engine.maintain() == 0)
        }
        #expect(engine.statistics().examined == 0, "500 s of passes with nothing due looked at nothing")
        // Keep one key read; at its refresh time only it is refreshed, and only the entries whose
        // records fell due (turning idle at 600 s, then the one refresh) were looked at.
        for _ in 0..<25 {
            clock.advance(100)
            _ = await engine.get(kind: "vehicle", id: "v-7")
            engine.maintain()
        }
        let stats = engine.statistics()
        #expect(await eventually { provider.fetches == 1001 }, "v-7 alone was refreshed, at 3000 s")
        #expect(stats.backgroundRefreshes == 1)
        #expect(stats.examined < 1100, "each idle entry was looked at once, not once a pass: \(stats.examined)")
    }

    @Test func aLargeStoreIsShardedAndEveryKeyIsFoundAgain() async {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider], maxEntries: 100_000, clock: clock)
        for index in 0..<2000 { _ = await engine.get(kind: "vehicle", id: "v-\(index)") }
        for index in 0..<2000 {
            guard case .ready(.success(let served)) = engine.lookup(kind: "vehicle", id: "v-\(index)", minValidity: nil)
            else {
                Issue.record("v-\(index) is not answered from the cache")
                return
            }
            #expect(served.token == "tok-v-\(index)-\(index + 1)")
        }
        #expect(engine.statistics().entries == 2000)
        #expect(engine.exportTokens(to: .memory).count == 2000)
        #expect(provider.fetches == 2000)
    }

    @Test func theBoundIsGlobalAcrossShards() {
        let clock = ManualClock()
        let engine = TokenEngine(
            providers: ["vehicle": ScriptedProvider(clock: clock)],
            maxEntries: 20_000,
            clock: clock
        )
        let expiresAt = Int64(clock.wallSeconds) + 3600
        let tokens = (0..<20_000).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "t-\($0)", expiresAt: expiresAt)
        }
        #expect(engine.importTokens(tokens, from: .memory) == 20_000)
        #expect(engine.statistics().entries == 20_000, "a full cache of unevenly spread keys loses none")
        engine.importTokens(
            [CachedToken(kind: "vehicle", id: "new", token: "t-new", expiresAt: expiresAt)],
            from: .memory
        )
        #expect(engine.statistics().entries == 20_000, "one more key evicts one")
        guard case .ready(.success(let served)) = engine.lookup(kind: "vehicle", id: "new", minValidity: nil) else {
            Issue.record("the new key is cached")
            return
        }
        #expect(served.token == "t-new")
        #expect(engine.drop(kind: "vehicle", id: "new") == nil)
        #expect(engine.statistics().entries == 19_999)
    }
}
