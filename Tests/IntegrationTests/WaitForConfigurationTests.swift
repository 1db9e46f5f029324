import Foundation
import TestSupport
import Testing
import TokenWire

/// `serve --wait-for-configuration`, as the packaged unit runs the agent on the installed config
/// that serves nothing: it starts instead of exiting 78, says what to configure (`STATUS=`, the
/// log, `PING`, every token request, `status`, `get`), and serves once a reload configures it.
@Suite("serve --wait-for-configuration")
struct WaitForConfigurationTests {
    /// The package's config.json: nothing to serve.
    static let shipped = #"{"providers": {}, "issuers": {}}"#

    @Test func waitsSayingWhatToConfigureThenAReloadMakesItServe() async throws {
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("config.json").path
        func writeConfig(_ text: String) throws { try text.write(toFile: config, atomically: true, encoding: .utf8) }
        try writeConfig(Self.shipped)
        let notify = try NotifyListener(directory: directory)
        let notConfigured = "ERR unavailable not configured: \(config) serves nothing: add a provider"

        // READY=1 carries the waiting status; the agent answers PING with the error, not PONG.
        async let started = AgentProcess(
            ["--config", config, "--wait-for-configuration"],
            environment: ["NOTIFY_SOCKET": notify.path],
            readyReply: notConfigured
        )
        let ready = try #require(try await notify.waitFor(timeout: hangLimit) { $0.fields["READY"] == "1" })
        let agent = try await started
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let status = ready.fields["STATUS"] ?? ""
        #expect(status.hasPrefix("waiting for configuration: \(config) serves nothing: add a provider"), "\(status)")
        #expect(status.hasSuffix("then reload: systemctl reload fleet-tokend"), "\(status)")

        // Every token request, and PING, names what to configure; the agent stays up.
        let replies = try await agent.send("GET vehicle w-1", "REFRESH trip w-2", "WARM vehicle w-3", "PING")
        #expect(replies.count == 4)
        for reply in replies { #expect(reply.hasPrefix(notConfigured), "\(reply)") }
        for index in 0..<20 {
            let reply = try await agent.send("GET vehicle w-\(index)")
            #expect(reply.first?.hasPrefix(notConfigured) == true, "\(reply)")
        }
        let stats = try await agent.stats()
        #expect(stats["reloads"] == 0, "STATS answers while waiting: fleet-tokend reload reads it")
        #expect(
            agent.log.components(separatedBy: "waiting for configuration: \(config) serves nothing").count == 2,
            "logged once, at start: \(agent.log)"
        )

        let report = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(report.status == 1, "\(report)")
        #expect(report.stdout.hasPrefix("fleet-tokend: waiting for configuration, up "), "\(report.stdout)")
        #expect(report.stdout.contains("  ! \(config) serves nothing: add a provider"), "\(report.stdout)")
        #expect(!report.stdout.contains("refresher stalled"))
        let json = try await run(AgentProcess.binary, ["status", "--json", "--socket", agent.socketPath])
        #expect(json.status == 1)
        #expect(json.stdout.contains(#""state":"unconfigured""#), "\(json.stdout)")
        let get = try await run(AgentProcess.binary, ["get", "vehicle", "w-1", "--socket", agent.socketPath])
        #expect(get.status == 69, "unavailable: \(get)")
        #expect(get.stderr.contains("not configured: \(config) serves nothing"), "\(get.stderr)")
        let ping = try await run(AgentProcess.binary, ["ping", "--socket", agent.socketPath])
        #expect(ping.status == 1, "\(ping)")
        #expect(ping.stderr.contains("not configured: "), "\(ping.stderr)")

        // A reload that still serves nothing is refused: the agent keeps waiting.
        let refused = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
        #expect(refused.status == 1, "\(refused)")
        #expect(agent.log.contains("reload refused; the old configuration stays"))
        #expect(try await agent.send("PING").first?.hasPrefix(notConfigured) == true)

        // The operator's edit, then a reload: the same process serves.
        try writeConfig(#"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}}}"#)
        let applied = try await run(
            AgentProcess.binary,
            ["reload", "--pid", "\(agent.pid)", "--socket", agent.socketPath]
        )
        #expect(applied.status == 0, "\(applied)")
        #expect(applied.stdout.contains("vehicle"), "the added kind is named: \(applied.stdout)")
        #expect(try await agent.send("PING") == ["PONG"])
        #expect(tokenOf(try await agent.send("GET vehicle w-1").first) != nil)
        let other = try await agent.send("GET trip w-2")
        #expect(other.first?.hasPrefix("ERR bad-kind kind trip is not configured") == true, "\(other)")
        let serving = try await notify.waitFor(timeout: hangLimit) {
            $0.fields["READY"] == "1" && $0.fields["STATUS"]?.contains("tokens held") == true
        }
        #expect(serving != nil, "READY=1 after the reload carries the serving status")
        #expect(agent.log.contains("no longer waiting for configuration: serving"))
        #expect(provider.requests(for: "w-1") == 1)
        let after = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(after.status == 0, "\(after)")
        #expect(after.stdout.hasPrefix("fleet-tokend: serving, up "), "\(after.stdout)")
        #expect(await agent.stop() == 0)
    }

    /// The wait is for a configuration that serves nothing only: a broken one still exits 78.
    @Test func aBrokenConfigurationStillExits78() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("config.json").path
        try #"{"providers": {}, "max_entries": 0}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let result = try await run(
            AgentProcess.binary,
            [
                "serve", "--wait-for-configuration", "--config", config, "--socket",
                directory.appendingPathComponent("tokens.sock").path,
            ]
        )
        #expect(result.status == 78, "\(result)")
        #expect(result.stderr.contains("configuration key max_entries: must be at least 1"), "\(result.stderr)")
    }

    /// check-config refuses the shipped config (78, naming what to configure) and, asked as the
    /// unit runs serve, passes it with the same warning the waiting agent gives.
    @Test func checkConfigSaysWhatTheWaitingAgentSays() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = directory.appendingPathComponent("config.json").path
        try Self.shipped.write(toFile: config, atomically: true, encoding: .utf8)
        let plain = try await run(AgentProcess.binary, ["check-config", "--config", config])
        #expect(plain.status == 78, "\(plain)")
        #expect(plain.stderr.contains("nothing to serve: configure an HTTP provider"), "\(plain.stderr)")
        let waiting = try await run(
            AgentProcess.binary,
            ["check-config", "--config", config, "--wait-for-configuration"]
        )
        #expect(waiting.status == 0, "\(waiting)")
        #expect(
            waiting.stdout.contains(
                "warning: serve --wait-for-configuration would wait for configuration: \(config) serves nothing: add a provider"
            ),
            "\(waiting.stdout)"
        )
    }
}
