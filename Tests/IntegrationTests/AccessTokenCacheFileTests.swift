import FakeGoogle
import Foundation
import Systemd
import TestSupport
import Testing
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

extension AccessTokenTests {
    /// An agent with a cache file and systemd's fd store, holding an access token and a JWT: at its
    /// stop the fd store's snapshot holds both, the file only the JWT (no access token, no digest
    /// of an entry's provider). A file that holds an access token anyway (here: the fd store's
    /// snapshot, planted in its place) gives it to no one: the next agent takes the JWT from it and
    /// asks IAM for a new access token.
    @Test func accessTokensNeverLandInTheCacheFileNorComeBackFromOne() async throws {
        let fake = try await Agent.fake()
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try NotifyListener(directory: directory)
        let socketPath = directory.appendingPathComponent("tokens.sock").path
        let vehicle = #""providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}}"#
        let config = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: #", \#(vehicle), "cache_file": "\#(setup.path)""#
        )
        let environment = Agent.environment(fake, directory: directory)

        let first = try await AgentProcess(
            ["--config", config],
            socketPath: socketPath,
            environment: environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        )
        defer { try? FileManager.default.removeItem(at: first.directory) }
        let access = try #require(tokenOf(try await first.send("GET access fleet-admin").first))
        let jwt = try #require(tokenOf(try await first.send("GET vehicle v-1").first))
        kill(first.pid, SIGTERM)
        let stored = try await notify.waitFor(timeout: 60) { message in
            guard message.fields["FDSTORE"] == "1", message.fields["FDNAME"] == "cache",
                let fd = message.descriptors.first, SealedMemoryFile.isSealed(fd),
                let bytes = try? SealedMemoryFile.read(fd), let snapshot = try? CacheSnapshot.read(bytes)
            else { return false }
            return snapshot.tokens.count == 2
        }
        let cacheFD = try #require(stored?.descriptors.first, "the stop's FDSTORE with both tokens")
        defer { close(cacheFD) }
        #expect(await first.stop() == 0)

        // The fd store's snapshot, in memory: both tokens, each kind's provider digest.
        let memoryBytes = try SealedMemoryFile.read(cacheFD)
        let memory = try CacheSnapshot.read(memoryBytes)
        #expect(Set(memory.tokens.map { "\($0.kind) \($0.id)" }) == ["access:fleet-admin fleet-admin", "vehicle v-1"])
        #expect(memory.tokens.first { $0.kind == "vehicle" }?.token == jwt)
        #expect(memory.tokens.first { $0.kind == "access:fleet-admin" }?.token == access)
        #expect(memory.providers["access:fleet-admin"] != nil)

        // The file: the JWT's key and nothing of the access token.
        let file = try setup.contents()
        #expect(file.tokens.map { "\($0.kind) \($0.id)" } == ["vehicle v-1"])
        #expect(file.tokens.first?.token == jwt)
        #expect(file.providers.keys.sorted() == ["vehicle"], "no entry's provider digest either")
        let text = String(decoding: try setup.bytes(), as: UTF8.self)
        #expect(!text.contains(access) && !text.contains("access:"))

        // A file holding the access token, with its provider's digest: only the JWT is adopted.
        try setup.write(memoryBytes)
        let second = try await AgentProcess(["--config", config], socketPath: socketPath, environment: environment)
        defer { try? FileManager.default.removeItem(at: second.directory) }
        let stats = try await second.stats()
        #expect(stats["snapshot_adopted"] == 1 && stats["snapshot_skipped"] == 1, "\(stats)")
        #expect(logField(second.log, "cache taken over", "source") == "file")
        #expect(logField(second.log, "cache taken over", "tokens") == "1")
        #expect(logField(second.log, "cache taken over", "tokens_refused") == "1")
        #expect(tokenOf(try await second.send("GET vehicle v-1").first) == jwt, "the JWT, from the file")
        #expect(provider.requests(for: "v-1") == 1, "not fetched again")
        let fresh = try #require(tokenOf(try await second.send("GET access fleet-admin").first))
        #expect(fresh != access, "the access token in the file is never served")
        #expect(fake.generateAccessTokenCalls.count == 2, "a new IAM call")
        #expect(!second.log.contains(access) && !second.log.contains(fresh))
        #expect(await second.stop() == 0)
        let rewritten = String(decoding: try setup.bytes(), as: UTF8.self)
        #expect(!rewritten.contains(access) && !rewritten.contains(fresh), "nor written back")
        await fake.stop()
    }
}
