import Foundation
import TestSupport
import Testing
import TokenAgent

/// The cache file against the real agent: one process's tokens served by the next with no fetch,
/// after a stop (a replacement, as a rollout does it) and after `kill -9` (a crash, which loses
/// only what was new since the last periodic write). Time windows come from the configuration
/// (a 1 s interval) and waits for counts, never from sleeps.
@Suite("Cache file: replacement and crash")
struct CacheFileTests {
    @Test func aReplacementServesThePreviousProcessTokensWithoutFetching() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let ids = (1...5).map { "r-\($0)" }

        let first = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: first.directory) }
        var tokens: [String: String] = [:]
        for id in ids {
            let token = try #require(tokenOf(try await first.send("GET vehicle \(id)").first))
            tokens[id] = token
        }
        let trip = try #require(tokenOf(try await first.send("GET trip t-1").first))
        #expect(await first.stop() == 0)
        #expect(first.log.contains("cache snapshot written"), "\(first.log)")

        // What is on the host: a regular file of the agent's uid, mode 0600, in version 3.
        let info = try #require(setup.status())
        #expect(info.st_mode & S_IFMT == S_IFREG)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(info.st_uid == geteuid())
        #expect(!FileManager.default.fileExists(atPath: setup.path + ".tmp"))
        let written = try setup.contents()
        #expect(written.formatVersion == 3)
        #expect(Set(written.tokens.map(\.id)) == Set(ids + ["t-1"]))

        let second = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: second.directory) }
        for id in ids {
            #expect(tokenOf(try await second.send("GET vehicle \(id)").first) == tokens[id], "\(id)")
            #expect(provider.requests(for: id) == 1, "\(id) was not fetched again")
        }
        #expect(tokenOf(try await second.send("GET trip t-1").first) == trip)
        let stats = try await second.stats()
        #expect(stats["fetches"] == 0)
        #expect(stats["snapshot_adopted"] == 6)
        #expect(stats["snapshot_skipped"] == 0)
        #expect(second.log.contains("cache taken over from the previous process"))
        #expect(logField(second.log, "cache taken over", "source") == "file")
        #expect(logField(second.log, "cache taken over", "tokens") == "6")
        for token in tokens.values { #expect(!second.log.contains(token) && !first.log.contains(token)) }
        // It wrote a fresh file at once: the adopted tokens are on the host again.
        #expect(
            try await eventually { (try await second.stats())["snapshot_writes"] ?? 0 >= 1 },
            "the start's write"
        )
        #expect(try Set(setup.contents().tokens.map(\.id)) == Set(ids + ["t-1"]))
        #expect(await second.stop() == 0)
    }

    @Test func afterKillNineTheNextProcessFetchesOnlyWhatWasNewSinceTheLastWrite() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }

        let first = try await AgentProcess(setup.arguments(provider, interval: 1))
        defer { try? FileManager.default.removeItem(at: first.directory) }
        let early = ["k-1", "k-2", "k-3"]
        for id in early { _ = try #require(tokenOf(try await first.send("GET vehicle \(id)").first)) }
        // A periodic write that holds them (the interval is 1 s: however slow the host, one comes).
        #expect(try await eventually { (try await first.stats())["snapshot_tokens"] == early.count })
        _ = try #require(tokenOf(try await first.send("GET vehicle k-new").first))
        kill(first.pid, SIGKILL)
        await first.stop()

        // What the file holds decides what the next process may fetch: the three always, k-new
        // only when a write came between its GET and the kill.
        let kept = Set(try setup.contents().tokens.map(\.id))
        #expect(kept.isSuperset(of: early))
        let second = try await AgentProcess(setup.arguments(provider, interval: 1))
        defer { try? FileManager.default.removeItem(at: second.directory) }
        for id in early + ["k-new"] {
            _ = try #require(tokenOf(try await second.send("GET vehicle \(id)").first), "\(id)")
            #expect(provider.requests(for: id) == (kept.contains(id) ? 1 : 2), "\(id)")
        }
        #expect((try await second.stats())["fetches"] == (kept.contains("k-new") ? 0 : 1))
        #expect(await second.stop() == 0)
    }

    /// `cache_file_interval: 0` writes only at start and at stop.
    @Test func anIntervalOfZeroWritesOnlyAtStartAndStop() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let agent = try await AgentProcess(setup.arguments(provider, interval: 0))
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(try await eventually { (try await agent.stats())["snapshot_writes"] == 1 }, "the start's write")
        _ = try #require(tokenOf(try await agent.send("GET vehicle z-1").first))
        #expect(try setup.contents().tokens.isEmpty, "nothing written since the start")
        #expect(await agent.stop() == 0)
        #expect(try setup.contents().tokens.map(\.id) == ["z-1"])
    }

    /// A write that fails (here: a directory squats the temporary file's name) is a warning and a
    /// count; the agent goes on serving, and the next write after the cause is gone succeeds.
    @Test func aFailedWriteIsAWarningAndACountNeverAStop() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let squatter = setup.path + ".tmp"
        try FileManager.default.createDirectory(atPath: squatter + "/inside", withIntermediateDirectories: true)
        let agent = try await AgentProcess(setup.arguments(provider, interval: 1))
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(try await eventually { (try await agent.stats())["snapshot_write_failures"] ?? 0 >= 2 })
        #expect(agent.log.contains("cannot write the cache snapshot"), "\(agent.log)")
        #expect(agent.log.contains("destination=file"))
        #expect(tokenOf(try await agent.send("GET vehicle f-1").first) != nil, "still serving")
        try FileManager.default.removeItem(atPath: squatter)
        #expect(try await eventually { (try await agent.stats())["snapshot_tokens"] == 1 })
        #expect(try setup.contents().tokens.map(\.id) == ["f-1"])
        #expect(await agent.stop() == 0)
    }

    /// A directory on a disk is refused, naming the key, unless `cache_file_on_disk` allows it.
    @Test func aCacheFileOnADiskIsRefusedUnlessAllowed() async throws {
        let disk = try AgentProcess.makeTemporaryDirectory()  // /tmp: a disk here, or tmpfs elsewhere
        defer { try? FileManager.default.removeItem(at: disk) }
        let type = try await run("/usr/bin/stat", ["-f", "-c", "%t", disk.path])  // the statfs type, hex
        try #require(type.status == 0)
        let memory = ["1021994", "858458f6"].contains(type.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let path = disk.appendingPathComponent("state/tokens.cache").path
        let serve = [AgentProcess.binary, "serve", "--demo", "--socket", disk.appendingPathComponent("t.sock").path]
        if !memory {
            let refused = try await run(serve[0], Array(serve.dropFirst()) + ["--cache-file", path])
            #expect(refused.status == 78)
            #expect(refused.stderr.contains("configuration key cache_file: "), "\(refused.stderr)")
            #expect(refused.stderr.contains("not a memory-backed file system"))
            #expect(refused.stderr.contains("cache_file_on_disk"))
            #expect(!FileManager.default.fileExists(atPath: path))
        }
        let config = disk.appendingPathComponent("on-disk.json").path
        try #"{"demo": true, "cache_file": "\#(path)", "cache_file_on_disk": true}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        let agent = try await AgentProcess(["--config", config])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(await eventually { FileManager.default.fileExists(atPath: path) })
        var directory = stat()
        #expect(lstat(disk.appendingPathComponent("state").path, &directory) == 0)
        #expect(directory.st_mode & 0o777 == 0o700, "a directory the agent made is its own")
        #expect(await agent.stop() == 0)
    }
}
