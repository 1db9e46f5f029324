import Foundation
import TestSupport
import Testing

/// `fleet-tokend status` with a cache file, against the real agent: a line saying where the file
/// is, its last write (age, tokens, size, duration) and what the start took from it, from STATS'
/// `snapshot_*` fields; none without a cache file. Both agents write only at start and stop
/// (`--cache-file-interval 0`), so what status reads stays put while the test compares it.
@Suite("Cache file: status")
struct CacheFileStatusTests {
    private func status(_ agent: AgentProcess, _ arguments: [String] = []) async throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath] + arguments)
    }

    /// The size as status writes it: `1.4 KiB`, `70.4 MiB`.
    private func size(_ bytes: Int) -> String {
        bytes >= 1 << 20
            ? String(format: "%.1f MiB", Double(bytes) / 1_048_576)
            : bytes >= 1024 ? String(format: "%.1f KiB", Double(bytes) / 1024) : "\(bytes) bytes"
    }

    @Test func statusSaysWhereTheFileIsItsLastWriteAndWhatTheStartTook() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        // A directory with a space and a `%` in its name (the agent makes it): one STATS field.
        let path = setup.directory + "/state 100%/tokens.cache"
        let arguments = [
            "--provider", "vehicle=\(provider.url(kind: "vehicle"))", "--cache-file", path,
            "--cache-file-interval", "0",
        ]

        let first = try await AgentProcess(arguments)
        defer { try? FileManager.default.removeItem(at: first.directory) }
        // The start's write first, so it holds none of the GETs' tokens.
        #expect(try await eventually { (try await first.stats())["snapshot_writes"] == 1 }, "the start's write")
        var tokens: [String] = []
        for id in ["s-1", "s-2"] {
            tokens.append(try #require(tokenOf(try await first.send("GET vehicle \(id)").first)))
        }
        let cold = try await status(first)
        #expect(cold.status == 0, "\(cold)")
        let coldLine = cold.stdout.split(separator: "\n").first { $0.hasPrefix("cache file: ") }.map(String.init)
        #expect(coldLine?.hasPrefix("cache file: \(path), written ") == true, "\(cold.stdout)")
        #expect(coldLine?.contains(" s ago (0 tokens, ") == true, "the start's write held nothing: \(cold.stdout)")
        #expect(coldLine?.hasSuffix(" ms); nothing adopted at start") == true, "\(cold.stdout)")
        #expect(await first.stop() == 0)

        let second = try await AgentProcess(arguments)
        defer { try? FileManager.default.removeItem(at: second.directory) }
        #expect(try await eventually { (try await second.stats())["snapshot_writes"] == 1 }, "the start's write")
        let stats = try await second.stats()
        let bytes = try #require(stats["snapshot_bytes"])
        let milliseconds = try #require(stats["snapshot_write_ms"])
        let writtenAt = try #require(stats["snapshot_written_at"])
        let warm = try await status(second)
        #expect(warm.status == 0, "\(warm)")
        let lines = warm.stdout.split(separator: "\n").map(String.init)
        let line = try #require(lines.first { $0.hasPrefix("cache file: ") }, "\(warm.stdout)")
        #expect(line.hasPrefix("cache file: \(path), written "), "\(line)")
        #expect(
            line.hasSuffix(" s ago (2 tokens, \(size(bytes)), in \(milliseconds) ms); adopted at start: 2"),
            "\(line)"
        )
        #expect(lines.firstIndex(of: line) == lines.firstIndex(of: "providers:").map { $0 - 1 }, "before providers")

        let json = try await status(second, ["--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let file = try #require(object["cache_file"] as? [String: Any], "\(json.stdout)")
        #expect(file["path"] as? String == path)
        #expect(file["tokens"] as? Int == 2)
        #expect(file["bytes"] as? Int == bytes)
        #expect(file["write_ms"] as? Int == milliseconds)
        #expect(file["written_at"] as? Int == writtenAt)
        #expect(file["writes"] as? Int == 1)
        #expect(file["write_failures"] as? Int == 0)
        #expect(file["adopted"] as? Int == 2)
        #expect(file["adopted_from"] as? String == "file")
        for output in [cold.stdout, warm.stdout, json.stdout] {
            for token in tokens { #expect(!output.contains(token), "a token was shown") }
        }
        #expect(await second.stop() == 0)
    }

    @Test func withoutACacheFileStatusHasNoCacheFileLine() async throws {
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let agent = try await AgentProcess(["--provider", "vehicle=\(provider.url(kind: "vehicle"))"])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let text = try await status(agent)
        #expect(text.status == 0, "\(text)")
        #expect(!text.stdout.contains("cache file"), "\(text.stdout)")
        let json = try await status(agent, ["--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(object["cache_file"] == nil, "\(json.stdout)")
        let stats = try #require(try await agent.send("STATS").first)
        #expect(stats.contains(" snapshot_file=- snapshot_source=- "), "\(stats)")
        #expect(await agent.stop() == 0)
    }
}
