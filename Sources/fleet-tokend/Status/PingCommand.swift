import ArgumentParser
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fleet-tokend ping`: the liveness probe, for hosts where no `socat` is at hand (a container
/// image holds the binary alone). It sends `PING` and exits 0 on `PONG`.
///
/// It fails only when the agent is stuck: no answer in time, or an answer saying its refresher
/// stalled. It also asks `STATS`: an agent that runs its demo issuer answers `PONG (demo issuer:
/// Fleet Engine refuses its tokens)`, still with status 0 (a peer denied `STATS` sees `PONG`).
/// A degraded agent (a token provider or IAM down) still answers `PONG`: it is serving
/// the tokens it holds, and restarting it would lose them. A busy agent (`ERR busy`: all its
/// connections taken) answers too, and passes.
struct PingCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ping",
        abstract: "Check that the running agent answers and its refresher runs (a liveness probe).",
        discussion:
            "Exit status: 0 the agent answered PONG, or busy (every connection taken); 1 it answered with another error (its refresher stalled, or it waits for configuration); 69 unreachable, or no answer in time."
    )

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Seconds the whole exchange with the agent may take.")
    var timeout: Double = 2

    @Flag(help: "Print nothing; the exit status says it all.")
    var quiet = false

    func run() throws {
        let path = socket ?? AgentDefaults.socketPath(environment: ProcessInfo.processInfo.environment)
        let reply: String
        var demo = false
        do {
            var connection = try AgentLineSocket(path: path, timeout: timeout)
            defer { connection.close() }
            try connection.write("PING\nSTATS\n")
            reply = try connection.readLine()
            // A busy agent closes after its one reply: then there is no STATS line to read.
            if reply == "PONG", let line = try? connection.readLine(),
                case .ok(let stats) = WireReply.parse(Substring(line))
            {
                demo = WireReply.statsFields(stats)["demo"] == "1"
            }
        } catch {
            fail("agent unreachable: \(error) (socket \(path))", status: 69)
        }
        if reply == "PONG" {
            if !quiet { print(demo ? "PONG (demo issuer: Fleet Engine refuses its tokens)" : "PONG") }
            return
        }
        if case .error(let error) = WireReply.parse(Substring(reply)) {
            // Busy (every connection taken, say) is an agent that answers: restarting it would
            // only drop its cache. Only a stalled refresher is a stuck agent.
            if error.code == .busy {
                if !quiet { print("busy: \(TerminalText.escaped(error.message))") }
                return
            }
            fail("the agent answered: \(error.code.rawValue) \(error.message)", status: 1)
        }
        fail("invalid reply from the agent (socket \(path))", status: 69)
    }

    /// Writes `message` (which may hold the agent's text, so escaped) and exits with `status`.
    private func fail(_ message: String, status: Int32) -> Never {
        if !quiet { StandardError.write("fleet-tokend: \(TerminalText.escaped(message))\n") }
        exitProcess(status)
    }
}
