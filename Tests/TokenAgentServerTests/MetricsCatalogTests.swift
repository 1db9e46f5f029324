import Foundation
import Logging
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
        let status = AgentStatus(engine: engine, server: ServerStatistics(), segments: segments, metrics: metrics)
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
