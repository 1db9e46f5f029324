import FakeGoogle
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The real agent's GCE metadata endpoint in STATS and the metrics: each answer moves its own
/// counter, the same in both; without the endpoint, one STATS field says so and no metric shows;
/// a `listen` address another process holds stops the agent at start, naming it.
@Suite("GCE metadata endpoint: STATS, metrics, start-up")
struct MetadataObservabilityTests {
    typealias Agent = AccessTokenAgent
    typealias Metadata = MetadataAgent

    static let entries =
        #""fleet-admin": \#(Agent.entry(Agent.admin)), "eta-viewer": \#(Agent.entry(Agent.viewer))"#

    /// The `metadata_` fields of `agent`'s STATS, as text.
    static func metadataFields(_ agent: AgentProcess) async throws -> [String: String] {
        let reply = try #require(try await agent.send("STATS").first)
        var fields: [String: String] = [:]
        for field in reply.split(separator: " ") where field.hasPrefix("metadata_") {
            let pair = field.split(separator: "=", maxSplits: 1)
            fields[String(pair[0])] = pair.count == 2 ? String(pair[1]) : ""
        }
        return fields
    }

    @Test func eachAnswerMovesItsCounterInSTATSAndTheMetrics() async throws {
        let fake = try await Agent.fake()
        let (agent, port) = try await Metadata.start(fake, entries: Self.entries)
        let zero = try await Self.metadataFields(agent)
        #expect(zero["metadata_listen"] == "127.0.0.1:\(port)")
        #expect(zero.filter { $0.key != "metadata_listen" }.allSatisfy { $0.value == "0" }, "\(zero)")

        // One request of each outcome but the unidentified peer (a unit test's: the kernel names
        // this one), and after each, only its own field has moved.
        let viewerToken = "/computeMetadata/v1/instance/service-accounts/\(Agent.viewer)/token"
        let requests: [(field: String, status: Int, ask: () async throws -> Metadata.Answer)] = [
            ("metadata_tokens", 200, { try await Metadata.get(port: port, Metadata.tokenPath) }),
            ("metadata_ok", 200, { try await Metadata.get(port: port, Metadata.emailPath) }),
            ("metadata_bad_request", 400, { try await Metadata.get(port: port, "/?wait_for_change=true") }),
            (
                "metadata_refused_host", 403,
                { try await Metadata.get(port: port, Metadata.tokenPath, headers: ["Host: evil.example"]) }
            ),
            (
                "metadata_refused_forwarded", 403,
                { try await Metadata.get(port: port, Metadata.tokenPath, headers: ["X-Forwarded-For: 10.0.0.1"]) }
            ),
            ("metadata_refused_flavor", 403, { try await Metadata.get(port: port, Metadata.tokenPath, flavor: false) }),
            (
                "metadata_refused_scopes", 403,
                { try await Metadata.get(port: port, Metadata.tokenPath + "?scopes=https://example.com/other") }
            ),
            ("metadata_not_found", 404, { try await Metadata.get(port: port, "/computeMetadata/v1/instance/zone") }),
            (
                "metadata_unavailable", 503,
                {
                    fake.inject(.serverError(status: 503), into: .generateAccessToken, account: Agent.viewer)
                    return try await Metadata.get(port: port, viewerToken)
                }
            ),
        ]
        var expected = zero
        for request in requests {
            let answer = try await request.ask()
            #expect(answer.status == request.status, "\(request.field): \(answer)")
            expected[request.field] = String(Int(expected[request.field] ?? "0")! + 1)
            // Each curl is a connection of its own, closed by now or soon.
            expected["metadata_connections_total"] = String(Int(expected["metadata_connections_total"] ?? "0")! + 1)
            let now = try await Self.metadataFields(agent).merging(["metadata_connections": "0"]) { $1 }
            #expect(now == expected, "after \(request.field)")
        }

        let samples = try await prometheusParse(try await agent.metricsText())
        let stats = try await Self.metadataFields(agent)
        for outcome in ["tokens", "ok", "bad_request", "refused_host", "refused_forwarded", "refused_flavor"]
            + ["refused_peer", "refused_rules", "refused_scopes", "not_found", "bad_method", "unavailable"]
        {
            let matching = samples.filter {
                $0.name == "fleet_tokend_metadata_requests_total" && $0.labels["outcome"] == outcome
            }
            #expect(matching.count == 1, "\(outcome)")
            #expect(matching.first?.value == Double(stats["metadata_\(outcome)"] ?? "x"), "\(outcome)")
        }
        #expect(samples.value("fleet_tokend_metadata_requests_total", ["code": "503", "outcome": "unavailable"]) == 1)
        #expect(samples.value("fleet_tokend_metadata_connections_total") == Double(requests.count))
        for reason in ["evicted", "head_timeout", "idle_timeout", "too_large", "request_timeout"] {
            #expect(samples.has("fleet_tokend_metadata_connections_closed_total", ["reason": reason]))
            #expect(samples.value("fleet_tokend_metadata_connections_closed_total", ["reason": reason]) == 0)
        }
        _ = await agent.stop()
        #expect(!agent.log.contains("ya29."), "the token is never logged")
        await fake.stop()
    }

    @Test func withoutTheEndpointOneFieldSaysSoAndNoMetricShows() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        #expect(try await Self.metadataFields(agent) == ["metadata_listen": "-"])
        let samples = try await prometheusParse(try await agent.metricsText())
        #expect(!samples.contains { $0.name.hasPrefix("fleet_tokend_metadata_") })
        await agent.stop()
    }

    /// Whether `notify` got READY=1 from an agent that has exited.
    private func saidReady(_ notify: NotifyListener) async throws -> Bool {
        while let message = try await notify.next(timeout: 0.2) {
            if message.fields["READY"] == "1" { return true }
        }
        return false
    }

    @Test func aListenAddressInUseStopsTheAgentNamingItBeforeItSaysReady() async throws {
        let fake = try await Agent.fake()
        let holder = try LoopbackSocket.listener(host: "127.0.0.1")
        let port = try holder.localAddress().port
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: Metadata.key(port: port, defaultEntry: "fleet-admin")
        )
        let socket = directory.appendingPathComponent("tokens.sock").path
        let notify = try NotifyListener(directory: directory)
        let environment = ProcessInfo.processInfo.environment.merging(Agent.environment(fake, directory: directory)) {
            $1
        }.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        let outcome = try await run(
            "/usr/bin/timeout",
            ["60", AgentProcess.binary, "serve", "--config", config, "--socket", socket],
            environment: environment
        )
        #expect(outcome.status == 1, "\(outcome.stderr)")
        #expect(
            outcome.stderr.contains(
                "metadata_server.listen 127.0.0.1:\(port): cannot listen: Address already in use (errno 98); "
                    + "another process holds the port: stop it, or set another port in metadata_server.listen"
            ),
            "\(outcome.stderr)"
        )
        #expect(outcome.stderr.contains("agent stopped"))
        // systemd sees a start that failed, not a started unit that fails a moment later.
        #expect(try await !saidReady(notify))
        _ = holder
        await fake.stop()
    }

    @Test func aMetricsAddressInUseStopsTheAgentBeforeItSaysReady() async throws {
        let holder = try LoopbackSocket.listener(host: "127.0.0.1")
        let port = try holder.localAddress().port
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("tokens.sock").path
        let notify = try NotifyListener(directory: directory)
        let environment = ProcessInfo.processInfo.environment.merging(["NOTIFY_SOCKET": notify.path]) { $1 }
        let outcome = try await run(
            "/usr/bin/timeout",
            [
                "60", AgentProcess.binary, "serve", "--demo", "--socket", socket, "--metrics-listen",
                "127.0.0.1:\(port)",
            ],
            environment: environment
        )
        #expect(outcome.status == 1, "\(outcome.stderr)")
        #expect(
            outcome.stderr.contains(
                "metrics_listen 127.0.0.1:\(port): cannot listen: Address already in use (errno 98); "
                    + "another process holds the port: stop it, or set another port in metrics_listen"
            ),
            "\(outcome.stderr)"
        )
        #expect(try await !saidReady(notify))
        _ = holder
    }
}
