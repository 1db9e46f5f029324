import ArgumentParser
import CSocketLoop
import FleetTokenClient
import TokenAgent
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `fleet-tokend reload [--pid PID]`: asks the agent answering on the socket to reload (SIGHUP)
/// and waits for the outcome, so `systemctl reload` (the unit's `ExecReload=`) returns once the new configuration
/// is applied, and fails when the agent refused it. Needs no `kill` binary. Only the agent
/// listening on the socket is signalled, through a pidfd the kernel gives a client that connects
/// (so a pid reused meanwhile is never signalled); with `--pid`, only when that agent is process
/// `PID`: any other process is refused (`cannot signal process PID`).
struct ReloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Ask the running agent to re-read its configuration and wait for the outcome.",
        discussion:
            "Exit status: 0 applied; 1 refused (the old configuration stays), no answer in time, or the outcome could not be read."
    )

    @Option(
        help:
            "The agent's process id ($MAINPID in the unit); refused unless it is the agent on the socket. Default: that agent."
    )
    var pid: Int32?

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Seconds to wait for the outcome.")
    var timeout: Double = 10

    func run() async throws {
        var configuration = FleetTokenClient.Configuration()
        configuration.reconnectDeadline = 0.5
        configuration.callTimeout = 2
        // One request and out: mapping a segment would only cost a round trip more.
        configuration.sharedMemory = false
        let path = socket ?? FleetTokenClient.defaultSocketPath
        let client = FleetTokenClient(socketPath: path, configuration: configuration)
        // Only the agent listening on the socket is signalled, and only if it is process `pid`
        // here: the kernel names the listener to whoever connects (its pid in this namespace, and
        // a pidfd for it), and the signal goes through that pidfd, so neither another process nor
        // a pid reused since is ever signalled.
        var listener: Int32 = 0
        let process = fsl_listener_pidfd(path, &listener)
        let target = pid.map { "process \($0)" } ?? "the agent"
        if process == -2 {
            fail("cannot signal \(target): the agent on \(path) is a process outside this PID namespace")
        }
        guard process >= 0 else {
            fail("cannot signal \(target): no agent answers on \(path) (\(String(cString: strerror(errno))))")
        }
        defer { close(process) }
        if let pid, listener != pid {
            fail("cannot signal process \(pid): the agent on \(path) is process \(listener)")
        }
        let pid = listener
        let before = try? await client.stats()
        guard fsl_pidfd_exited(process) == 0, fsl_pidfd_send_signal(process, SIGHUP) == 0 else {
            fail("cannot signal process \(pid): it has exited")
        }
        guard let before else {
            fail("signalled process \(pid), but cannot read the outcome: STATS did not answer on the socket")
        }
        guard let applied = before["reloads"], let refused = before["reload_failures"] else {
            fail("signalled process \(pid), but cannot read the outcome: STATS has no reload counts")
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(saturating: timeout * 1000))
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            guard let now = try? await Self.statsFields(path) else { continue }
            if (now["reloads"].flatMap { Int($0) } ?? 0) > applied {
                // An agent of another version may not say what changed, or say it otherwise.
                let changes = now["reload_changes"].flatMap { ReloadChanges.describe(field: $0) }
                print("reload applied by the agent on \(path) (process \(pid))" + (changes.map { ": \($0)" } ?? ""))
                return
            }
            if (now["reload_failures"].flatMap { Int($0) } ?? 0) > refused {
                // An agent of another version may not say why.
                let reason = now["reload_error"].flatMap { $0 == "-" ? nil : StatsText.decode($0) }
                fail(
                    "the agent refused the new configuration and kept the old one"
                        + (reason.map { ": \(TerminalText.escaped($0))" } ?? "; see its log")
                )
            }
        }
        fail("no reload outcome within \(timeout) s")
    }

    /// Every STATS field as text (the client's `stats()` keeps only the numbers), on a connection
    /// of its own, off Swift concurrency's pool.
    private static func statsFields(_ path: String) async throws -> [String: String] {
        try await Task.detached {
            var connection = try AgentLineSocket(path: path, timeout: 2)
            defer { connection.close() }
            try connection.write("STATS\n")
            guard case .ok(let text) = WireReply.parse(Substring(try connection.readLine())) else {
                throw AgentLineSocket.InvalidReply(description: "unexpected STATS reply")
            }
            return WireReply.statsFields(text)
        }.value
    }

    private func fail(_ message: String) -> Never {
        StandardError.write("fleet-tokend: \(message)\n")
        exitProcess(1)
    }
}
