import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The agent's process: its output and its threads")
struct ClosedOutputTests {
    /// The thread that serves the socket is named for `top -H`, perf and crash reports (Linux
    /// keeps 15 bytes of a name; a longer one is refused and the thread keeps a runtime name).
    @Test func theSocketLoopsThreadIsNamed() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { Task { await agent.stop() } }
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(agent.pid)/task")
        let names = tasks.compactMap {
            try? String(contentsOfFile: "/proc/\(agent.pid)/task/\($0)/comm", encoding: .utf8)
        }
        .map { $0.trimmingCharacters(in: .newlines) }
        #expect(names.filter { $0 == "tokend-socket" }.count == 1, "\(names)")
        #expect(await agent.stop() == 0)
    }

    /// Standard output and error are a pipe nobody reads any more (a log collector that was
    /// restarted): every log line fails with EPIPE, and the agent serves on through start-up, a
    /// reload and its requests, then stops cleanly.
    @Test func aClosedPipeOnStandardOutputAndErrorIsNotFatal() async throws {
        var ends: [Int32] = [-1, -1]
        #expect(pipe(&ends) == 0)
        close(ends[0])  // nobody reads: the agent's first write would raise SIGPIPE
        let output = FileHandle(fileDescriptor: ends[1], closeOnDealloc: true)
        let agent = try await AgentProcess(["--demo", "--log-level", "debug"], output: output)
        try output.close()
        #expect(try await agent.send("PING") == ["PONG"])
        #expect(kill(agent.pid, SIGHUP) == 0, "a reload logs too")
        let deadline = ContinuousClock.now + .seconds(60)
        var reloads = 0
        while reloads < 1, ContinuousClock.now < deadline {
            reloads = try await agent.stats()["reloads"] ?? 0
            if reloads < 1 { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(reloads == 1, "the reload was applied")
        let reply = try await agent.send("GET vehicle v-1", "NOPE")
        #expect(reply.first?.hasPrefix("OK ") == true)
        #expect(reply.last?.hasPrefix("ERR ") == true)
        #expect(await agent.stop() == 0, "alive until SIGTERM, and a clean exit (not signal 13)")
    }
}
