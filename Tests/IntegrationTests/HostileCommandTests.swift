import Foundation
import Testing
import TokenWire

/// `fleet-tokend get` and `status` against whatever answers on the socket: bounded in time and
/// memory, and nothing the peer sent reaches the terminal unescaped.
@Suite("Hostile replies to the command line")
struct HostileCommandTests {
    @Test(arguments: ImplausibleTokenReply.all)
    func getPrintsNoTokenTheAgentCouldNotServe(_ reply: ImplausibleTokenReply) async throws {
        let agent = try HostileAgent { _ in reply.answer }
        defer { agent.stop() }
        let run = try await runBounded(
            AgentProcess.binary,
            ["get", "vehicle", "v-1", "--socket", agent.socketPath],
            killAfter: 60
        )
        #expect(run.status == 65, "\(run.stderr)")
        #expect(run.stdout.isEmpty)
        #expect(run.stderr.hasPrefix("fleet-tokend: invalid reply: "), "\(run.stderr)")
    }

    @Test func getEscapesTheAgentsErrorText() async throws {
        let agent = try HostileAgent { _ in .line("ERR denied \u{1B}]0;title\u{07}\u{1B}[2Jgo away") }
        defer { agent.stop() }
        let run = try await runBounded(
            AgentProcess.binary,
            ["get", "vehicle", "v-1", "--socket", agent.socketPath],
            killAfter: 60
        )
        #expect(run.status == 77)
        #expect(run.stderr == "fleet-tokend: denied: \\x1b]0;title\\x07\\x1b[2Jgo away\n")
    }

    /// An agent that answers `PING` and `STATS` and then `METRICS` with `metrics`.
    private func agent(metrics: HostileAgent.Answer) throws -> HostileAgent {
        try HostileAgent { line in
            switch line {
            case "PING": .line("PONG")
            case "STATS": .line("OK uptime_s=5 entries=1 hits=1 misses=1")
            default: metrics
            }
        }
    }

    private func status(_ agent: HostileAgent, _ arguments: [String], killAfter: Double) async throws -> BoundedRun {
        try await runBounded(
            AgentProcess.binary,
            ["status", "--socket", agent.socketPath] + arguments,
            killAfter: killAfter
        )
    }

    @Test func statusStopsAnEndlessMetricsReplyAtItsLimit() async throws {
        let agent = try agent(metrics: .endless(Array(String(repeating: "# HELP x y\n", count: 400).utf8)))
        defer { agent.stop() }
        // The time-out is far off: only the limit on the bytes read can stop it this soon.
        let run = try await status(agent, ["--timeout", "300"], killAfter: 60)
        #expect(!run.killed, "still reading after 60 s")
        #expect(run.status == 69)
        #expect(run.stderr.contains("invalid reply from the agent: the replies are over"), "\(run.stderr)")
        #expect(agent.bytesWritten < WireLimits.maxMetricsReplyBytes + 4 * 1024 * 1024)
    }

    @Test func statusTimeoutBoundsTheWholeExchange() async throws {
        // A line every 50 ms: no single read waits long, but the reply never ends.
        let agent = try agent(metrics: .trickle(Array("# HELP x y\n".utf8), interval: 0.05))
        defer { agent.stop() }
        let timeout = 2.0
        let run = try await status(agent, ["--timeout", "\(timeout)"], killAfter: timeout + 30)
        #expect(!run.killed, "still reading \(timeout + 30) s after a \(timeout) s time-out")
        #expect(run.status == 69)
        #expect(run.stderr.contains("no complete reply within 2.0 s"), "\(run.stderr)")
    }

    @Test func statusRefusesAReplyLineWithNoEnd() async throws {
        let agent = try HostileAgent { _ in .endless(Array(repeating: UInt8(ascii: "a"), count: 4096)) }
        defer { agent.stop() }
        let run = try await status(agent, ["--timeout", "300"], killAfter: 60)
        #expect(!run.killed, "still reading after 60 s")
        #expect(run.status == 69)
        #expect(run.stderr.contains("a reply line is over \(WireLimits.maxReplyLineBytes) bytes"), "\(run.stderr)")
    }

    /// A degraded agent whose label values hold a terminal title, a screen clear and a line break.
    private static let hostileExposition = [
        "fleet_tokend_healthy 0",
        #"fleet_tokend_degraded{kind="vehicle",reason="x\#u{1B}]0;title\#u{07}\#u{1B}[2J\nfleet-tokend: serving"} 1"#,
        #"fleet_tokend_provider_failing_seconds{kind="trip\#u{1B}[2J"} 5"#,
        #"fleet_tokend_provider_last_failure_timestamp_seconds{kind="trip\#u{1B}[2J",reason="5xx\nfake"} 100"#,
        "# EOF",
    ].joined(separator: "\n")

    @Test func statusEscapesEveryValueItPrintsAndJSONKeepsThemAsTheyAre() async throws {
        let agent = try agent(metrics: .line(Self.hostileExposition))
        defer { agent.stop() }
        let run = try await status(agent, [], killAfter: 60)
        #expect(run.status == 1, "degraded: \(run.stderr)")
        #expect(!run.stdout.contains(0x1B) && !run.stdout.contains(0x07), "\(run.stdoutText)")
        let lines = run.stdoutText.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("fleet-tokend: serving") || $0.hasPrefix("fake") }, "\(run.stdoutText)")
        #expect(run.stdoutText.contains(#"! vehicle: x\x1b]0;title\x07\x1b[2J\nfleet-tokend: serving"#))
        #expect(run.stdoutText.contains(#"trip\x1b[2J"#))
        #expect(run.stdoutText.contains(#"last error 5xx\nfake"#))

        // JSON escapes by its own rules: the values are the agent's, as they are.
        let json = try await status(agent, ["--json"], killAfter: 60)
        #expect(json.status == 1, "degraded: \(json.stderr)")
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout)) as? [String: Any])
        let kinds = try #require(object["kinds"] as? [[String: Any]])
        let vehicle = try #require(kinds.first { $0["kind"] as? String == "vehicle" })
        #expect(
            vehicle["degraded_reasons"] as? [String] == ["x\u{1B}]0;title\u{07}\u{1B}[2J\nfleet-tokend: serving"]
        )
        #expect(
            kinds.contains { $0["kind"] as? String == "trip\u{1B}[2J" && $0["last_error"] as? String == "5xx\nfake" }
        )
    }
}
