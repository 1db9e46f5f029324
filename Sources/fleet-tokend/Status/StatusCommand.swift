import ArgumentParser
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `fleet-tokend status`: a readable summary of a running agent, from `PING`, `STATS` and
/// `METRICS` (the last two are admin verbs when an admin list is configured).
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show whether the running agent is serving or degraded, and why.",
        discussion:
            "Exit status: 0 serving, 1 degraded or waiting for configuration (serve --wait-for-configuration with nothing to serve), 69 agent unreachable, 77 denied (STATS and METRICS are for the agent's admins)."
    )

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Flag(help: "Print one JSON object instead of text.")
    var json = false

    @Option(help: "Seconds the whole exchange with the agent may take.")
    var timeout: Double = 5

    func run() throws {
        let environment = ProcessInfo.processInfo.environment
        let path =
            socket ?? environment["FLEET_TOKEND_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "/run/fleet-tokend/tokens.sock"
        let ping: String
        let stats: String
        let metrics: Result<[String], WireError>
        do {
            var connection = try AgentLineSocket(path: path, timeout: timeout)
            defer { connection.close() }
            try connection.write("PING\nSTATS\nMETRICS\n")
            ping = try connection.readLine()
            stats = try connection.readLine()
            metrics = try connection.readMetrics()
        } catch let error as AgentLineSocket.InvalidReply {
            fail("invalid reply from the agent: \(error) (socket \(path))", status: 69)
        } catch {
            fail("agent unreachable: \(error) (socket \(path))", status: 69)
        }
        if case .error(let error) = WireReply.parse(Substring(stats)), error.code == .denied {
            fail("denied: \(error.message)", status: 77)
        }
        guard case .ok(let statsText) = WireReply.parse(Substring(stats)) else {
            fail("unexpected STATS reply", status: 69)
        }
        let samples: [MetricsText.Sample]
        switch metrics {
        case .success(let lines): samples = MetricsText.samples(lines)
        case .failure(let error) where error.code == .denied: fail("denied: \(error.message)", status: 77)
        case .failure(let error): fail("METRICS failed: \(error)", status: 69)
        }
        let report = StatusReport(ping: ping, stats: WireReply.statsFields(statsText), samples: samples)
        let now = Date().timeIntervalSince1970
        if json {
            print(report.json(now: now), terminator: "")
        } else {
            let colour =
                isatty(STDOUT_FILENO) == 1 && (environment["NO_COLOR"] ?? "").isEmpty
                && environment["TERM"] != "dumb"
            print(report.text(colour: colour, now: now), terminator: "")
        }
        if report.degraded { throw ExitCode(1) }
    }

    /// Writes `message` (which may hold the agent's text, so escaped) and exits with `status`.
    private func fail(_ message: String, status: Int32) -> Never {
        StandardError.write("fleet-tokend: \(TerminalText.escaped(message))\n")
        exitProcess(status)
    }
}
