import Foundation
import Logging
import MetadataEndpoint
import Testing
import TokenAgent
import TokenWire

@testable import TokenAgentServer

@Suite("Metrics catalog and exposition")
struct MetricsCatalogTests {
    @Test func everyMetricIsDocumentedInOperations() throws {
        let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/OPERATIONS.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        for entry in MetricCatalog.entries {
            let listed = text.contains("`\(entry.name)`")
            #expect(listed, "docs/OPERATIONS.md lists \(entry.name)")
        }
    }

    @Test func theExpositionHasHelpAndTypeForEveryMetricAndReadsBack() {
        let metrics = AgentMetrics()
        let engine = TokenEngine(providers: ["vehicle": LocalIssuerStub()], metrics: metrics.engineMetrics)
        let segments = SharedSegments(kinds: ["vehicle"], policy: RefreshPolicy(), logger: Logger(label: "test"))
        let metadata = MetadataStatistics(listen: try! MetadataListenAddress(parsing: "127.0.0.1:8989"))
        metadata.countAnswer(.refusedHost)
        metadata.countClosed(.headTimeout)
        let status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            segments: segments,
            metrics: metrics,
            metadata: metadata
        )
        metrics.requests.count(.get, .ok)
        metrics.requests.count(.ping, .rejected)  // a code PING never has: counted under `other`
        let text = String(decoding: status.metricsReply(), as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        let present = Set(lines)
        #expect(lines.last == MetricsText.endLine)
        #expect(lines.filter { $0 == MetricsText.endLine }.count == 1)
        for entry in MetricCatalog.entries
        where entry.name != "fleet_tokend_soonest_expiry_seconds"
            && entry.name != "fleet_tokend_provider_last_failure_timestamp_seconds"
            && entry.name != "fleet_tokend_provider_clock_skew_seconds"
            && entry.name != "fleet_tokend_snapshot_write_failures_total"  // one series per destination; none here
            // Only with a federated host identity (FederationTests checks them).
            && !entry.name.hasPrefix("fleet_tokend_sts_") && !entry.name.hasPrefix("fleet_tokend_impersonation_")
        {
            let type = present.contains("# TYPE \(entry.name) \(entry.kind.rawValue)")
            let help = present.contains("# HELP \(entry.name) \(entry.help)")
            #expect(type, "\(entry.name)")
            #expect(help, "\(entry.name)")
        }
        let samples = MetricsText.samples(lines)
        #expect(
            samples.contains(
                MetricsText.Sample(
                    name: "fleet_tokend_requests_total",
                    labels: ["verb": "GET", "code": "ok"],
                    value: 1
                )
            )
        )
        #expect(
            samples.contains(
                MetricsText.Sample(
                    name: "fleet_tokend_requests_total",
                    labels: ["verb": "other", "code": "rejected"],
                    value: 1
                )
            )
        )
        #expect(!samples.contains { $0.labels["verb"] == "PING" && $0.labels["code"] == "rejected" })
        #expect(samples.contains { $0.name == "fleet_tokend_healthy" && $0.value == 1 })
        // Every outcome and every closure has its series from the start.
        let answers = samples.filter { $0.name == "fleet_tokend_metadata_requests_total" }
        #expect(answers.count == MetadataOutcome.allCases.count)
        #expect(
            answers.contains(
                MetricsText.Sample(
                    name: "fleet_tokend_metadata_requests_total",
                    labels: ["code": "403", "outcome": "refused_host"],
                    value: 1
                )
            )
        )
        #expect(answers.filter { $0.value != 0 }.count == 1)
        let closed = samples.filter { $0.name == "fleet_tokend_metadata_connections_closed_total" }
        #expect(closed.count == MetadataStatistics.Closure.allCases.count)
        #expect(closed.filter { $0.value != 0 }.map(\.labels) == [["reason": "head_timeout"]])
    }

    /// Without an endpoint, STATS says so in one field and the metrics have none of its series;
    /// with one, its address and counts.
    @Test func theMetadataEndpointsFieldsAreThereOnlyWithIt() throws {
        let engine = TokenEngine(providers: ["vehicle": LocalIssuerStub()])
        let off = AgentStatus(engine: engine, server: ServerStatistics())
        let offFields = try off.statsReplyText().split(separator: " ").filter { $0.hasPrefix("metadata_") }
        #expect(offFields == ["metadata_listen=-"])
        let offMetrics = String(decoding: off.metricsReply(), as: UTF8.self)
        #expect(!offMetrics.contains("fleet_tokend_metadata_"))

        let metadata = MetadataStatistics(listen: try MetadataListenAddress(host: "::1", port: 0))
        metadata.bound(try MetadataListenAddress(parsing: "[::1]:8989"))
        metadata.countAnswer(.token)
        metadata.countAnswer(.token)
        metadata.countAnswer(.unavailable)
        metadata.countAdmitted()
        metadata.countAdmitted()
        metadata.countReleased()
        metadata.countRefused()
        let on = try AgentStatus(engine: engine, server: ServerStatistics(), metadata: metadata).statsReplyText()
        let fields = Dictionary(
            uniqueKeysWithValues: on.split(separator: " ").filter { $0.hasPrefix("metadata_") }.map { field in
                let pair = field.split(separator: "=", maxSplits: 1)
                return (String(pair[0]), String(pair[1]))
            }
        )
        #expect(fields["metadata_listen"] == "[::1]:8989")
        #expect(fields["metadata_tokens"] == "2")
        #expect(fields["metadata_unavailable"] == "1")
        #expect(fields["metadata_refused_rules"] == "0")
        #expect(fields["metadata_connections"] == "1")
        #expect(fields["metadata_connections_total"] == "2")
        #expect(fields["metadata_connections_refused"] == "1")
        #expect(fields["metadata_head_timeout"] == "0")
        #expect(fields.count == 1 + MetadataOutcome.allCases.count + 3 + MetadataStatistics.Closure.allCases.count)
    }

    @Test func listenAddresses() throws {
        let loopback = try MetricsListenAddress(parsing: "127.0.0.1:9464")
        #expect(loopback.host == "127.0.0.1" && loopback.port == 9464 && loopback.isLoopback)
        #expect(try MetricsListenAddress(parsing: "9464").description == "127.0.0.1:9464")
        #expect(try MetricsListenAddress(parsing: ":9464").description == "127.0.0.1:9464")
        #expect(try MetricsListenAddress(parsing: "localhost:9464").description == "127.0.0.1:9464")
        #expect(try MetricsListenAddress(parsing: "[::1]:9464").isLoopback)
        #expect(try !MetricsListenAddress(parsing: "0.0.0.0:9464").isLoopback)
        for bad in ["", "host:9464", "127.0.0.1:0", "127.0.0.1:65536", "1.2.3:80", "[::1]9464", "127.0.0.1:x"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try MetricsListenAddress(parsing: bad) }
        }
    }
}

/// Tokens from memory, drawing on a signature budget (so that the budget's metrics show).
private struct LocalIssuerStub: TokenProvider {
    let budget = SignatureBudget(perMinute: 60)
    var summary: String { "stub" }
    var signatureBudget: SignatureBudget? { budget }
    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        FetchedToken(token: "t-\(key.id)", expiresAtUnixSeconds: SystemAgentClock().wallSeconds + 3600)
    }
}
