import Logging
import Synchronization
import Testing
import TokenAgent
import TokenAgentServer
import TokenWire

/// What each destination of a cache snapshot gets: the fd store (memory) every kind's tokens, the
/// cache file (disk) never an access token nor an entry's provider digest; one snapshot for both
/// when no kind keeps its tokens in memory.
@Suite("Snapshot writer: what each medium holds")
struct SnapshotWriterTests {
    static let access = AccessTokenKind.kind(name: "fleet-admin")

    /// A destination that keeps what it was given.
    final class Recorded: WholeSnapshotDestination {
        let name: String
        let medium: TokenCacheMedium
        private let written = Mutex<[UInt8]?>(nil)

        init(_ name: String, _ medium: TokenCacheMedium) {
            self.name = name
            self.medium = medium
        }

        func received(_ bytes: [UInt8]) throws { written.withLock { $0 = bytes } }

        var bytes: [UInt8]? { written.withLock { $0 } }

        func contents() throws -> CacheSnapshot.Contents {
            try CacheSnapshot.read(try #require(bytes, "\(name) was not written"))
        }
    }

    /// An access-token entry's provider, as the engine sees it.
    struct EntryProvider: TokenProvider {
        var summary: String { "entry" }
        var servingFloor: Double? { AccessTokenKind.servingFloor }
        var tokensStayInMemory: Bool { true }
        func fetchToken(for key: TokenKey) async throws -> FetchedToken {
            FetchedToken(token: "ya29.\(key.id)", expiresAtUnixSeconds: SystemAgentClock().wallSeconds + 3600)
        }
    }

    /// An engine holding `tokens` (as from the fd store), written by a writer to a file and the fd
    /// store.
    private func write(
        providers: [String: any TokenProvider],
        tokens: [CachedToken]
    ) throws -> (file: Recorded, store: Recorded, statistics: SnapshotStatistics) {
        let engine = TokenEngine(providers: providers)
        #expect(engine.importTokens(tokens, from: .memory) == tokens.count)
        let file = Recorded("file", .disk)
        let store = Recorded("fd_store", .memory)
        let statistics = SnapshotStatistics(destinations: ["file", "fd_store"])
        let digests = Dictionary(uniqueKeysWithValues: providers.keys.map { ($0, "digest-\($0)") })
        let writer = SnapshotWriter(
            engine: engine,
            destinations: [file, store],
            digests: { digests },
            statistics: statistics,
            logger: Logger(label: "test")
        )
        #expect(writer.write(reason: "test"))
        return (file, store, statistics)
    }

    @Test func theFileNeverHoldsAnAccessTokenTheFdStoreHoldsEveryKinds() throws {
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        let tokens = [
            CachedToken(kind: "vehicle", id: "v-1", token: "tok-v-1", expiresAt: expiresAt),
            CachedToken(kind: Self.access, id: "fleet-admin", token: "ya29.secret", expiresAt: expiresAt),
        ]
        let (file, store, statistics) = try write(
            providers: ["vehicle": InstantProvider(), Self.access: EntryProvider()],
            tokens: tokens
        )
        let memory = try store.contents()
        #expect(Set(memory.tokens) == Set(tokens))
        #expect(memory.providers == ["vehicle": "digest-vehicle", Self.access: "digest-\(Self.access)"])
        let disk = try file.contents()
        #expect(disk.tokens == [tokens[0]])
        #expect(disk.providers == ["vehicle": "digest-vehicle"])
        #expect(!String(decoding: try #require(file.bytes), as: UTF8.self).contains("ya29"))
        // The statistics record the larger snapshot: the fd store's.
        #expect(statistics.counts.lastWrite?.tokens == 2)
        #expect(statistics.counts.lastWrite?.bytes == store.bytes?.count)
    }

    @Test func withoutAnAccessKindBothGetTheSameSnapshot() throws {
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        let tokens = (1...3).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "tok-v-\($0)", expiresAt: expiresAt)
        }
        let (file, store, statistics) = try write(providers: ["vehicle": InstantProvider()], tokens: tokens)
        #expect(file.bytes != nil && file.bytes == store.bytes)
        #expect(Set(try file.contents().tokens) == Set(tokens))
        #expect(statistics.counts.lastWrite?.tokens == 3)
    }
}
