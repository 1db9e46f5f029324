import ArgumentParser
import FleetTokenClient
import Foundation
import TokenWire

/// `fleet-tokend reload --pid PID`: asks a running agent to reload (SIGHUP) and waits for the
/// outcome, so `systemctl reload` (the unit's `ExecReload=`) returns once the new configuration is
/// applied, and fails when the agent refused it. Needs no `kill` binary.
struct ReloadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Ask the running agent to re-read its configuration and wait for the outcome.",
        discussion:
            "Exit status: 0 applied; 1 refused (the old configuration stays), no answer in time, or the outcome could not be read."
    )

    @Option(help: "The agent's process id ($MAINPID in the unit).")
    var pid: Int32

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
        let client = FleetTokenClient(
            socketPath: socket ?? FleetTokenClient.defaultSocketPath,
            configuration: configuration
        )
        let before = try? await client.stats()
        // pid 1 is init on a host, never to be signalled; in a container it is the agent itself.
        guard pid > 1 || (pid == 1 && Self.isThisProgram(pid: 1)), kill(pid, SIGHUP) == 0 else {
            fail("cannot signal process \(pid)")
        }
        guard let before, let applied = before["reloads"], let refused = before["reload_failures"] else {
            fail("signalled process \(pid), but cannot read the outcome: STATS did not answer on the socket")
        }
        let deadline = ContinuousClock.now + .milliseconds(Int64(saturating: timeout * 1000))
        while ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            guard let now = try? await client.stats() else { continue }
            if (now["reloads"] ?? 0) > applied { return }
            if (now["reload_failures"] ?? 0) > refused {
                fail("the agent refused the new configuration and kept the old one; see its log")
            }
        }
        fail("no reload outcome within \(timeout) s")
    }

    private func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("fleet-tokend: \(message)\n".utf8))
        Foundation.exit(1)
    }

    /// Whether process `pid` runs the same executable as this one (`/proc/<pid>/exe`).
    static func isThisProgram(pid: Int32) -> Bool {
        guard let mine = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"),
            let theirs = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        else { return false }
        return mine == theirs
    }
}
