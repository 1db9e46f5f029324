import Logging
import Synchronization
import Testing
import TokenAgent
import TokenAgentServer

/// A periodic pass copies the tokens out of the store in bursts with rests between them
/// (``SnapshotPacing``), so the socket loop never waits behind it for more than one burst; the
/// write at stop, when nothing else runs, does not rest.
@Suite("Snapshot writer: a periodic pass's pacing")
struct SnapshotPacingTests {
    /// The rests a pass asked for, in microseconds.
    final class Rests: Sendable {
        private let asked = Mutex<[Int]>([])
        func record(_ microseconds: Int) { asked.withLock { $0.append(microseconds) } }
        var all: [Int] { asked.withLock { $0 } }
    }

    /// A destination that keeps the last snapshot it was given.
    final class Kept: WholeSnapshotDestination {
        let name = "file"
        let medium = TokenCacheMedium.disk
        private let kept = Mutex<[UInt8]?>(nil)
        func received(_ bytes: [UInt8]) throws { kept.withLock { $0 = bytes } }
        var tokens: [CachedToken]? { kept.withLock { $0 }.map { CacheSnapshot.decode($0) } }
    }

    static let tokenCount = 300

    /// A writer of ``tokenCount`` cached tokens (several chunks of the copy) to `destination`,
    /// paced by `pacing`.
    private func writer(to destination: Kept, pacing: SnapshotPacing) -> (SnapshotWriter, SnapshotStatistics) {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        let tokens = (0..<Self.tokenCount).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "tok-\($0)", expiresAt: expiresAt)
        }
        #expect(engine.importTokens(tokens, from: .memory) == Self.tokenCount)
        let statistics = SnapshotStatistics(destinations: ["file"])
        let writer = SnapshotWriter(
            engine: engine,
            destinations: [destination],
            digests: { ["vehicle": "digest"] },
            statistics: statistics,
            pacing: pacing,
            logger: Logger(label: "test")
        )
        return (writer, statistics)
    }

    @Test func aPeriodicPassRestsAfterEachBurstAndTheWriteAtStopNever() async throws {
        let rests = Rests()
        let destination = Kept()
        // Bursts of 0 µs: a rest after every chunk of the copy.
        let pacing = SnapshotPacing(burstMicroseconds: 0, restMicroseconds: 7) { rests.record($0) }
        let (writer, _) = writer(to: destination, pacing: pacing)
        #expect(await writer.writeOffLoop(reason: "interval"))
        let chunks = rests.all.count
        // 300 tokens in chunks of at most 32 slots: at least 10 chunks, each followed by a rest.
        #expect(chunks >= Self.tokenCount / TokenEngine.exportChunk)
        #expect(rests.all.allSatisfy { $0 == 7 })
        #expect(destination.tokens?.count == Self.tokenCount, "resting loses nothing")
        #expect(writer.write(reason: "stop"))
        #expect(rests.all.count == chunks, "the write at stop does not rest")
        #expect(destination.tokens?.count == Self.tokenCount)
    }

    @Test func aPassShorterThanABurstNeverRests() async throws {
        let rests = Rests()
        let destination = Kept()
        let pacing = SnapshotPacing(burstMicroseconds: 10_000_000, restMicroseconds: 7) { rests.record($0) }
        let (writer, _) = writer(to: destination, pacing: pacing)
        #expect(await writer.writeOffLoop(reason: "interval"))
        #expect(rests.all.isEmpty)
        #expect(destination.tokens?.count == Self.tokenCount)
    }

    @Test func aPassGivenUpDuringItsCopyWritesNothing() async throws {
        let destination = Kept()
        let rests = Rests()
        let box = Mutex<SnapshotWriter?>(nil)
        // The agent stops during the copy's first rest.
        let pacing = SnapshotPacing(burstMicroseconds: 0, restMicroseconds: 7) { microseconds in
            rests.record(microseconds)
            box.withLock { $0 }?.giveUpPassesOffLoop()
        }
        let (writer, statistics) = writer(to: destination, pacing: pacing)
        box.withLock { $0 = writer }
        #expect(await writer.writeOffLoop(reason: "interval") == false)
        #expect(rests.all.count == 1, "the copy stopped at the chunk after which it was given up")
        #expect(destination.tokens?.count == nil, "nothing was written")
        #expect(statistics.counts.writes == 0)
        #expect(statistics.counts.failures.values.allSatisfy { $0 == 0 }, "giving up is not a failure")
        #expect(writer.write(reason: "stop"))
        #expect(destination.tokens?.count == Self.tokenCount)
    }
}
