import Foundation
import TestSupport
import Testing
import TokenAgent

@testable import TokenAgentServer

/// ``InstantProvider``'s tokens, drawing on a signature budget.
private struct BudgetedProvider: TokenProvider {
    let budget = SignatureBudget(perMinute: 6, wakesItself: false)

    var summary: String { "budgeted" }
    var signatureBudget: SignatureBudget? { budget }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        try await InstantProvider().fetchToken(for: key)
    }
}

/// The per-kind signature budget fields of STATS against PROTOCOL.md's table (the agent's
/// integration tests cannot show them until a configuration gives a kind a budget), and their
/// metrics in the exposition.
@Suite("Signature budget in STATS and METRICS")
struct SignatureBudgetDocsTests {
    private func status() -> (AgentStatus, BudgetedProvider) {
        let provider = BudgetedProvider()
        let metrics = AgentMetrics()
        let engine = TokenEngine(
            providers: ["vehicle": provider, "trip": InstantProvider()],
            metrics: metrics.engineMetrics
        )
        return (AgentStatus(engine: engine, server: ServerStatistics(), metrics: metrics), provider)
    }

    /// The names of a `name=value …` reply text.
    private func fieldNames(_ text: String) -> [String] {
        text.split(separator: " ").compactMap { field in field.firstIndex(of: "=").map { String(field[..<$0]) } }
    }

    @Test func theBudgetFieldsAreTheDocumentedPerKindOnes() async throws {
        let (status, provider) = status()
        _ = await status.engine.get(kind: "vehicle", id: "v-1")
        let text = try status.statsReplyText()
        let fields = fieldNames(text)
        let perKind = fields.filter { $0.hasSuffix("_vehicle") }
        #expect(!fields.contains { $0.hasSuffix("_trip") }, "a kind without a budget has none")
        let section = try #require(DocText.section("STATS", in: try DocText.read("docs/PROTOCOL.md")))
        let documented = DocText.tables(section).filter { $0.header.first == "Field" }
            .flatMap { $0.rows.flatMap { DocText.codeSpans($0[0]) } }
            .filter { $0.hasSuffix("_<kind>") }
            .map { $0.replacingOccurrences(of: "<kind>", with: "vehicle") }
        #expect(perKind == documented, "STATS: \(text)")
        #expect(
            text.contains(" signs_vehicle=1 sign_queued_vehicle=0 sign_throttled_vehicle=0 sign_timeouts_vehicle=0")
        )
        #expect(provider.budget.counters.signatures == 1)
    }

    @Test func theBudgetMetricsAreExported() async throws {
        let (status, _) = status()
        _ = await status.engine.get(kind: "vehicle", id: "v-1")
        let exposition = String(decoding: status.metricsReply(), as: UTF8.self)
        for name in [
            "fleet_tokend_signatures_total", "fleet_tokend_signature_waiters",
            "fleet_tokend_signature_throttled_total", "fleet_tokend_signature_timeouts_total",
        ] {
            #expect(exposition.contains("# HELP \(name) \(MetricCatalog.help(name))"), "\(name)")
            #expect(exposition.contains("\(name){kind=\"vehicle\"}"), "\(name)")
            #expect(!exposition.contains("\(name){kind=\"trip\"}"), "\(name)")
        }
        #expect(exposition.contains("fleet_tokend_signatures_total{kind=\"vehicle\"} 1"))
    }
}
