import Foundation
import TestSupport
import Testing
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// The demo issuer runs only when asked for (`--demo`, `"demo": true`), never beside something
/// real to serve, and a demo agent says so wherever an operator looks.
@Suite("The demo issuer, only on purpose")
struct DemoIssuerTests {
    @Test func serveWithNothingToServeExits78NamingWhatToConfigure() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let result = try await run(AgentProcess.binary, ["serve", "--socket", directory + "/tokens.sock"])
        #expect(result.status == 78, "EX_CONFIG: \(result)")
        #expect(result.stderr.contains("configuration key providers: nothing to serve: configure an HTTP provider"))
        #expect(result.stderr.contains("--demo"), "the way to the demo is named too")
        #expect(!FileManager.default.fileExists(atPath: directory + "/tokens.sock"), "nothing was bound")
    }

    @Test func theDemoBesideAProviderIsRefused() async throws {
        let result = try await run(
            AgentProcess.binary,
            [
                "serve", "--demo", "--provider", "vehicle=http://127.0.0.1:1/{id}", "--socket",
                TestTemporary.path("ftd-never", suffix: ".sock"),
            ]
        )
        #expect(result.status == 78, "\(result)")
        #expect(result.stderr.contains("configuration key demo: the demo issuer runs only alone"))
    }

    @Test func aDemoAgentSaysSoInStatsMetricsStatusPingAndItsLog() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { Task { await agent.stop() } }
        #expect(try await agent.stats()["demo"] == 1)
        let metrics = try await agent.metricsText()
        #expect(Self.gauge("fleet_tokend_demo_issuer", in: metrics) == 1)
        #expect(Self.gauge("fleet_tokend_healthy", in: metrics) == 1, "healthy keeps meaning serving")
        let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(status.stdout.contains("demo:      the demo issuer runs: Fleet Engine refuses its tokens"), "\(status)")
        let json = try await run(AgentProcess.binary, ["status", "--json", "--socket", agent.socketPath])
        #expect(json.stdout.contains(#""demo":true"#), "\(json)")
        let ping = try await run(AgentProcess.binary, ["ping", "--socket", agent.socketPath])
        #expect(ping.status == 0 && ping.stdout == "PONG (demo issuer: Fleet Engine refuses its tokens)\n")
        #expect(agent.log.components(separatedBy: "DEMO ISSUER").count == 2, "once at start")
        #expect(kill(agent.pid, SIGHUP) == 0)
        #expect(try await eventually(every: .milliseconds(50)) { try await agent.stats()["reloads"] == 1 })
        #expect(agent.log.components(separatedBy: "DEMO ISSUER").count == 3, "and again at a reload")
    }

    @Test func anAgentWithAProviderIsNoDemo() async throws {
        try await withProviderAndAgent { agent, _ in
            #expect(try await agent.stats()["demo"] == 0)
            #expect(Self.gauge("fleet_tokend_demo_issuer", in: try await agent.metricsText()) == 0)
            let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
            #expect(!status.stdout.contains("demo:"), "\(status)")
            let ping = try await run(AgentProcess.binary, ["ping", "--socket", agent.socketPath])
            #expect(ping.status == 0 && ping.stdout == "PONG\n")
            #expect(!agent.log.contains("DEMO ISSUER"))
        }
    }

    /// The value of the unlabelled sample `name` in an exposition; `nil` when there is none.
    private static func gauge(_ name: String, in exposition: String) -> Double? {
        MetricsText.samples(exposition.split(separator: "\n")).first { $0.name == name && $0.labels.isEmpty }?.value
    }
}
