import Foundation
import Logging
import Synchronization
import Testing
import TokenAgent
import TokenAgentServer

/// A pass streams its snapshot into the destinations a piece at a time (about
/// ``SnapshotWriter/flushBytes`` each), never holding the body whole; the header goes in last, at
/// the start. A destination that fails on the way is a failure of its own; the others are whole.
@Suite("Snapshot writer: a pass streams its body")
struct SnapshotStreamingTests {
    /// A destination that records the size of each piece appended, and what it was committed;
    /// its append numbered `failingAt` (from 1) throws.
    final class Pieces: SnapshotDestination {
        struct Failure: Error {}
        struct Seen {
            var pieces: [Int] = []
            var body: [UInt8] = []
            var committed: [UInt8]?
            var abandoned = 0
        }

        let name: String
        let medium = TokenCacheMedium.disk
        let failingAt: Int?
        let seen = Mutex(Seen())

        init(_ name: String, failingAt: Int? = nil) {
            self.name = name
            self.failingAt = failingAt
        }

        func begin() throws -> any SnapshotSink { Sink(self) }

        final class Sink: SnapshotSink {
            let destination: Pieces
            init(_ destination: Pieces) { self.destination = destination }

            func append(_ bytes: UnsafeRawBufferPointer) throws {
                try destination.seen.withLock {
                    if $0.pieces.count + 1 == destination.failingAt { throw Failure() }
                    $0.pieces.append(bytes.count)
                    $0.body += bytes
                }
            }

            func commit(_ framing: CacheSnapshot.Encoded) throws {
                destination.seen.withLock { $0.committed = framing.header + $0.body + framing.body }
            }

            func abandon() { destination.seen.withLock { $0.abandoned += 1 } }
        }
    }

    static let tokenCount = 3000

    /// An engine holding ``tokenCount`` tokens of about 200 bytes: some 650 KB of body.
    private func engine() -> (TokenEngine, [CachedToken]) {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        let padding = String(repeating: "x", count: 180)
        let tokens = (0..<Self.tokenCount).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "tok-\($0).\(padding)", expiresAt: expiresAt)
        }
        #expect(engine.importTokens(tokens, from: .memory) == Self.tokenCount)
        return (engine, tokens)
    }

    private func writer(_ engine: TokenEngine, to destinations: [any SnapshotDestination]) -> (
        SnapshotWriter, SnapshotStatistics
    ) {
        let statistics = SnapshotStatistics(destinations: destinations.map(\.name))
        let writer = SnapshotWriter(
            engine: engine,
            destinations: destinations,
            digests: { ["vehicle": "digest"] },
            statistics: statistics,
            logger: Logger(label: "test")
        )
        return (writer, statistics)
    }

    @Test func aLargeSnapshotGoesOutInPiecesOfAboutTheFlushSize() throws {
        let (engine, tokens) = engine()
        let destination = Pieces("file")
        let (writer, statistics) = writer(engine, to: [destination])
        #expect(writer.write(reason: "stop"))
        let seen = destination.seen.withLock { $0 }
        let committed = try #require(seen.committed)
        #expect(Set(try CacheSnapshot.read(committed).tokens) == Set(tokens))
        // Each piece is the flush size and at most one chunk's tokens more: never the body whole.
        let chunk = TokenEngine.exportChunk * 240
        #expect(seen.pieces.count >= committed.count / (SnapshotWriter.flushBytes + chunk))
        #expect(seen.pieces.count > 5)
        #expect(seen.pieces.allSatisfy { $0 >= SnapshotWriter.flushBytes && $0 <= SnapshotWriter.flushBytes + chunk })
        #expect(statistics.counts.lastWrite?.bytes == committed.count)
        #expect(statistics.counts.lastWrite?.tokens == Self.tokenCount)
    }

    @Test func aDestinationFailingOnTheWayIsAFailureAndTheOthersAreWhole() throws {
        let (engine, tokens) = engine()
        let failing = Pieces("failing", failingAt: 3)
        let whole = Pieces("whole")
        let (writer, statistics) = writer(engine, to: [failing, whole])
        #expect(writer.write(reason: "stop") == false)
        let failed = failing.seen.withLock { $0 }
        #expect(failed.committed == nil && failed.abandoned == 1 && failed.pieces.count == 2)
        let committed = try #require(whole.seen.withLock { $0.committed })
        #expect(Set(try CacheSnapshot.read(committed).tokens) == Set(tokens))
        #expect(statistics.counts.failures["failing"] == 1)
        #expect(statistics.counts.failures["whole"] ?? 0 == 0)
        #expect(statistics.counts.writes == 0, "a pass is recorded only when every destination took it")
    }

    /// A destination whose first `begin()` fails; then it keeps what it is committed.
    final class FailingOnce: WholeSnapshotDestination {
        struct Failure: Error {}
        let name = "file"
        let medium = TokenCacheMedium.disk
        let state = Mutex<(begun: Int, received: [UInt8]?)>((0, nil))

        func begin() throws -> any SnapshotSink {
            let begun = state.withLock {
                $0.begun += 1
                return $0.begun
            }
            if begun == 1 { throw Failure() }
            return CollectingSink(self)
        }

        func received(_ bytes: [UInt8]) throws { state.withLock { $0.received = bytes } }
    }

    @Test func aTryTakenAgainAfterAReloadCountsNothingOfTheTryBefore() throws {
        let (engine, tokens) = engine()
        let destination = FailingOnce()
        let statistics = SnapshotStatistics(destinations: ["file"])
        // A reload lands during the first try: its two reads of the digests differ.
        let reads = Mutex(0)
        let writer = SnapshotWriter(
            engine: engine,
            destinations: [destination],
            digests: {
                let read = reads.withLock {
                    $0 += 1
                    return $0
                }
                return ["vehicle": read == 1 ? "before" : "after"]
            },
            statistics: statistics,
            logger: Logger(label: "test")
        )
        #expect(writer.write(reason: "stop"))
        let state = destination.state.withLock { $0 }
        #expect(state.begun == 2)
        let contents = try CacheSnapshot.read(try #require(state.received))
        #expect(contents.providers == ["vehicle": "after"])
        #expect(Set(contents.tokens) == Set(tokens))
        #expect(statistics.counts.failures["file"] ?? 0 == 0, "the failed try was taken again")
        #expect(statistics.counts.writes == 1)
    }

    @Test func theCacheFileTakesTheStreamAtomically() throws {
        let directory = "/dev/shm/ftd-stream-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = CacheFile(path: "\(directory)/tokens.cache", onDisk: false)
        try file.prepare()
        let first = CacheSnapshot.encode([CachedToken(kind: "vehicle", id: "v-0", token: "tok-0", expiresAt: 1)])
        try file.write(CacheSnapshot.frame(Array(first[CacheSnapshot.headerBytes...])))
        // Abandoned on the way: the file is as it was, and no temporary file is left.
        let abandoned = try file.begin()
        try Array(repeating: UInt8(ascii: "x"), count: 1000).withUnsafeBytes { try abandoned.append($0) }
        abandoned.abandon()
        #expect(FileManager.default.contents(atPath: file.path).map(Array.init) == first)
        #expect(!FileManager.default.fileExists(atPath: file.path + ".tmp"))
        // Streamed and committed: it reads back whole, mode 0600.
        let (engine, tokens) = engine()
        let (writer, _) = writer(engine, to: [file])
        #expect(writer.write(reason: "stop"))
        guard case .read(let contents) = file.read() else {
            Issue.record("the file was not read back")
            return
        }
        #expect(Set(contents.tokens) == Set(tokens))
        let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(!FileManager.default.fileExists(atPath: file.path + ".tmp"))
    }
}
