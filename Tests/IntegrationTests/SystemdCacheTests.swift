import Foundation
import Systemd
import TestSupport
import Testing
import TokenAgent

/// The cache under systemd, against the real agent and a test-owned `NOTIFY_SOCKET`: the fd
/// store's snapshot is refreshed every `cache_file_interval`, so a process killed with `kill -9`
/// leaves its cache there for the next one; and when systemd passes a cache, it wins over the
/// cache file.
@Suite("systemd: the fd store's snapshot, refreshed")
struct SystemdCacheTests {
    @Test func aKilledProcessLeavesItsCacheInTheFdStoreAndTheFdStoreWinsOverTheFile() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try NotifyListener(directory: directory)
        let environment = ["NOTIFY_SOCKET": notify.path]
        let socketPath = directory.appendingPathComponent("tokens.sock").path

        let first = try await AgentProcess(
            setup.arguments(provider, interval: 1),
            socketPath: socketPath,
            environment: environment
        )
        let token = try #require(tokenOf(try await first.send("GET vehicle p-1").first))
        // A periodic refresh of the fd store that holds it, with no stop.
        let stored = try await notify.waitFor(timeout: 60) { message in
            guard message.fields["FDSTORE"] == "1", message.fields["FDNAME"] == "cache",
                let fd = message.descriptors.first, SealedMemoryFile.isSealed(fd),
                let bytes = try? SealedMemoryFile.read(fd), let snapshot = try? CacheSnapshot.read(bytes)
            else { return false }
            return snapshot.tokens.map(\.id) == ["p-1"]
        }
        let cacheFD = try #require(stored?.descriptors.first, "a periodic FDSTORE with p-1")
        defer { close(cacheFD) }
        kill(first.pid, SIGKILL)
        await first.stop()

        // The file says otherwise (a p-2 it would adopt): the fd store's cache wins, unread file.
        let written = try setup.contents()
        let now = Int64(Date().timeIntervalSince1970)
        let planted = FakeTokenProvider.jwt(["exp": now + 3000, "authorization": ["vehicleid": "p-2"]])
        var builder = CacheSnapshot.Builder(providers: written.providers)
        builder.append(CachedToken(kind: "vehicle", id: "p-2", token: planted, expiresAt: now + 3000))
        try setup.write(builder.finish().bytes)

        let second = try await AgentProcess(
            setup.arguments(provider),
            socketPath: socketPath,
            environment: environment,
            launcher: [
                "/bin/sh", "-c",
                "exec 3</proc/\(getpid())/fd/\(cacheFD); LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=cache exec \"$0\" \"$@\"",
            ]
        )
        #expect(tokenOf(try await second.send("GET vehicle p-1").first) == token, "from the fd store")
        #expect(provider.requests(for: "p-1") == 1)
        #expect(second.log.contains("the fd store's cache wins"), "\(second.log)")
        #expect(logField(second.log, "cache taken over", "source") == "fd_store")
        let fetched = try #require(tokenOf(try await second.send("GET vehicle p-2").first))
        #expect(fetched != planted, "the file was not read")
        #expect(provider.requests(for: "p-2") == 1)
        #expect(await second.stop() == 0)
    }
}
