import Synchronization
import Testing

@testable import TokenAgent

/// Storage that keeps tokens in a dictionary, can refuse them, and lets the test change or drop
/// what it holds behind the store's back, to show where the store reads its tokens from.
final class RecordingStorage: TokenStorage, Sendable {
    private struct State {
        var tokens: [String: [UInt8]] = [:]
        var expiries: [String: MonotonicInstant] = [:]
        var accepting = true
        var stored = 0
    }

    private let state = Mutex(State())

    private static func key(_ kind: String, _ id: String) -> String { kind + "\u{0}" + id }

    /// Whether the storage takes the tokens it is given.
    func setAccepting(_ accepting: Bool) { state.withLock { $0.accepting = accepting } }
    /// The bytes held for a key, as text.
    func token(_ kind: String, _ id: String) -> String? {
        state.withLock { $0.tokens[Self.key(kind, id)].map { String(decoding: $0, as: UTF8.self) } }
    }
    /// The monotonic expiry the storage was last given for a key it holds.
    func expiry(_ kind: String, _ id: String) -> MonotonicInstant? {
        state.withLock { $0.tokens[Self.key(kind, id)] == nil ? nil : $0.expiries[Self.key(kind, id)] }
    }
    /// Replaces what the storage holds for a key, as if its memory said something else.
    func overwrite(_ kind: String, _ id: String, with token: String) {
        state.withLock { $0.tokens[Self.key(kind, id)] = Array(token.utf8) }
    }
    /// Lets a key go without telling the store.
    func lose(_ kind: String, _ id: String) { _ = state.withLock { $0.tokens.removeValue(forKey: Self.key(kind, id)) } }

    func tokenStored(
        kind: String,
        id: String,
        token: String,
        expiry: MonotonicInstant,
        lifetime: Double,
        unixExpiry: UnixTime
    ) -> Bool {
        state.withLock { state in
            state.stored += 1
            state.tokens[Self.key(kind, id)] = state.accepting ? Array(token.utf8) : nil
            state.expiries[Self.key(kind, id)] = expiry
            return state.accepting
        }
    }

    func prefetch(hint: UInt64) {}

    func tokenRemoved(kind: String, id: String) {
        _ = state.withLock { $0.tokens.removeValue(forKey: Self.key(kind, id)) }
    }

    func withToken(
        kind: String,
        id: UnsafeRawBufferPointer,
        hint: inout UInt64,
        _ body: (UnsafeRawBufferPointer) -> Void
    ) -> Bool {
        guard let bytes = state.withLock({ $0.tokens[Self.key(kind, String(decoding: id, as: UTF8.self))] }) else {
            return false
        }
        bytes.withUnsafeBytes(body)
        return true
    }
}

@Suite("Token store: one copy, kept by the storage")
struct TokenStorageTests {
    private func makeEngine(_ storage: RecordingStorage) -> (TokenEngine, ScriptedProvider, ManualClock) {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider], clock: clock, random: { 0 }, storage: storage)
        return (engine, provider, clock)
    }

    @Test func aTokenTheStorageTookIsReadBackFromTheStorage() async throws {
        let storage = RecordingStorage()
        let (engine, provider, _) = makeEngine(storage)
        let first = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(first.token == "tok-v-1-1")
        #expect(storage.token("vehicle", "v-1") == "tok-v-1-1")
        // What the storage holds is what is served, exported and fingerprinted: the store has no
        // copy of its own to serve instead.
        storage.overwrite("vehicle", "v-1", with: "tok-as-the-segment-says")
        #expect(try await engine.get(kind: "vehicle", id: "v-1").get().token == "tok-as-the-segment-says")
        #expect(engine.exportTokens(to: .memory).map(\.token) == ["tok-as-the-segment-says"])
        // The cache snapshot encodes the storage's bytes straight into its body.
        var builder = CacheSnapshot.Builder(providers: [:])
        engine.exportTokens(to: .memory, into: &builder)
        let encoded = try CacheSnapshot.read(builder.finish().bytes)
        #expect(encoded.tokens == engine.exportTokens(to: .memory))
        #expect(encoded.tokens.map(\.token) == ["tok-as-the-segment-says"])
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        #expect(info.fingerprint == TokenFingerprint.of("tok-as-the-segment-says"))
        #expect(provider.fetches == 1)
    }

    @Test func theFastLookupHandsTheStoragesBytesWithoutACopyOfItsOwn() async throws {
        let storage = RecordingStorage()
        let (engine, _, clock) = makeEngine(storage)
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        storage.overwrite("vehicle", "v-1", with: "bytes-in-memory")
        var seen: (text: String, expiresAt: Int64, owned: Bool)?
        let lookup = Array("v-1".utf8).withUnsafeBytes { id in
            engine.lookup(kind: "vehicle", idBytes: id, minValidity: nil) { token in
                seen = (String(decoding: token.bytes, as: UTF8.self), token.expiresAt, token.owned != nil)
            }
        }
        guard case .served = lookup else {
            Issue.record("not served through the closure")
            return
        }
        #expect(seen?.text == "bytes-in-memory")
        #expect(seen?.expiresAt == Int64(clock.wallSeconds + 3600))
        #expect(seen?.owned == false, "the store keeps no String of a token the storage holds")
    }

    @Test func aTokenTheStorageRefusedStaysTheStoresOwn() async throws {
        let storage = RecordingStorage()
        storage.setAccepting(false)
        let (engine, provider, _) = makeEngine(storage)
        #expect(try await engine.get(kind: "vehicle", id: "v-1").get().token == "tok-v-1-1")
        #expect(storage.token("vehicle", "v-1") == nil)
        var owned = false
        _ = Array("v-1".utf8).withUnsafeBytes { id in
            engine.lookup(kind: "vehicle", idBytes: id, minValidity: nil) { owned = $0.owned != nil }
        }
        #expect(owned)
        #expect(try await engine.get(kind: "vehicle", id: "v-1").get().token == "tok-v-1-1")
        #expect(engine.exportTokens(to: .memory).map(\.token) == ["tok-v-1-1"])
        #expect(provider.fetches == 1)
    }

    @Test func aTokenTheStorageLostIsAMissNeverAnEmptyToken() async throws {
        let storage = RecordingStorage()
        let (engine, provider, _) = makeEngine(storage)
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        storage.lose("vehicle", "v-1")
        #expect(try await engine.get(kind: "vehicle", id: "v-1").get().token == "tok-v-1-2")
        #expect(provider.fetches == 2)
        #expect(storage.token("vehicle", "v-1") == "tok-v-1-2")
        #expect(engine.statistics().misses == 2)
    }

    @Test func refreshComparesTheRefusedTokenWithTheStoragesBytes() async throws {
        let storage = RecordingStorage()
        let (engine, provider, clock) = makeEngine(storage)
        let first = try await engine.get(kind: "vehicle", id: "v-1").get().token
        clock.advance(10)  // past the re-fetch guard
        // Naming another token: the cached one is newer, answered at once.
        #expect(
            try await engine.awaitRefresh(kind: "vehicle", id: "v-1", refusedToken: "tok-other").get().token == first
        )
        #expect(provider.fetches == 1)
        // Naming the cached one: it leaves the storage and is replaced.
        let second = try await engine.awaitRefresh(kind: "vehicle", id: "v-1", refusedToken: first).get().token
        #expect(second == "tok-v-1-2")
        #expect(storage.token("vehicle", "v-1") == second)
    }

    @Test func anExpiredTokenLeavesTheStorageAndItsFingerprintStays() async throws {
        let storage = RecordingStorage()
        let (engine, provider, clock) = makeEngine(storage)
        provider.setMode(.succeed(lifetime: 60))
        let token = try await engine.get(kind: "vehicle", id: "v-1").get().token
        provider.setMode(.fail(.failed("down")))
        clock.advance(55)  // under the 10 s serving floor
        engine.maintain()
        #expect(storage.token("vehicle", "v-1") == nil, "an unservable token leaves shared memory")
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        #expect(info.fingerprint == TokenFingerprint.of(token), "INFO still names the token the entry held")
        #expect(engine.exportTokens(to: .memory).isEmpty)
        #expect(engine.survey().first?.activeTokens == 1, "still counted as an active key's token for health")
    }
}
