import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@Suite("The agent's uid outside its PID namespace")
struct PIDNamespaceTests {
    /// With `trust_root: false` the agent's own uid passes every rule only from the agent's own
    /// PID namespace. A process of that uid in a child PID namespace (`unshare --pid --fork`, as
    /// a container started by the agent's uid would be) has a pid the agent can see, and is still
    /// a stranger: the kind's rules apply to it.
    @Test(
        .enabled(
            if: getuid() == 0 && which("unshare") != nil && which("socat") != nil,
            "needs root (the agent's uid here), unshare and socat"
        )
    )
    func theAgentsUIDInAChildPIDNamespaceIsAStranger() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory()
        let config = directory.appendingPathComponent("config.json").path
        try #"{"demo": true, "trust_root": false, "allow": {"vehicle": {"users": [4000123]}}}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        let agent = try await AgentProcess(["--config", config])
        defer { Task { await agent.stop() } }
        let own = try await run(
            which("socat")!,
            ["-t", "5", "-", "UNIX-CONNECT:\(agent.socketPath)"],
            stdin: "GET vehicle k-1\n"
        )
        #expect(own.stdout.hasPrefix("OK "), "the agent's uid in its own namespace passes: \(own)")

        let child = try await run(
            which("unshare")!,
            ["--pid", "--fork", which("socat")!, "-t", "5", "-", "UNIX-CONNECT:\(agent.socketPath)"],
            stdin: "GET vehicle k-1\nGET trip k-1\n"
        )
        let lines = child.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "ERR denied not allowed to ask for kind vehicle", "\(child)")
        #expect(lines.count == 2 && lines[1].hasPrefix("OK "), "a kind without rules stays open")
        #expect(await agent.stop() == 0)
    }
}
