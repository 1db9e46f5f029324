import Foundation
import TokenAgent
import TokenWire

/// What `STATS` reports: the engine's counters, the server's, and the uptime.
public struct AgentStatus: Sendable {
    /// The engine whose counters are reported.
    public let engine: TokenEngine
    /// The server whose connections are counted.
    public let server: ServerStatistics
    /// The reloads applied and refused.
    public let reloads: ReloadStatistics
    /// The access rules, with the count of denied requests.
    public let access: AccessControl
    /// The shared-memory segments; `nil` when the operator turned them off.
    public let segments: SharedSegments?
    /// The metrics registry `METRICS` exports.
    public let metrics: AgentMetrics
    /// The health judge (thresholds and the refresher's heartbeat).
    public let health: AgentHealth
    private let startedAt: Double
    /// The clock uptime is counted on.
    let clock: any AgentClock

    /// Creates the status of `engine` and `server`, counting uptime from now.
    public init(
        engine: TokenEngine,
        server: ServerStatistics,
        reloads: ReloadStatistics = ReloadStatistics(),
        access: AccessControl = AccessControl(),
        segments: SharedSegments? = nil,
        metrics: AgentMetrics = AgentMetrics(),
        health: AgentHealth = AgentHealth(),
        clock: any AgentClock = SystemAgentClock()
    ) {
        self.access = access
        self.segments = segments
        self.metrics = metrics
        self.health = health
        self.engine = engine
        self.server = server
        self.reloads = reloads
        self.clock = clock
        self.startedAt = clock.monotonicSeconds
    }

    /// Seconds since start.
    public var uptime: Int { Int(saturating: clock.monotonicSeconds - startedAt) }

    /// The `STATS` reply text: `entries=… hits=… misses=… fetches=… fetch_errors=… connections=…
    /// uptime_s=…`, then further counters.
    public func statsText() -> String {
        let stats = engine.statistics()
        return [
            "entries=\(stats.entries)",
            "hits=\(stats.hits)",
            "misses=\(stats.misses)",
            "fetches=\(stats.fetches)",
            "fetch_errors=\(stats.fetchErrors)",
            "connections=\(server.openConnections)",
            "uptime_s=\(uptime)",
            "refreshes=\(stats.backgroundRefreshes)",
            "inflight=\(stats.inFlight)",
            "served_after_failure=\(stats.servedAfterFailure)",
            "connections_total=\(server.acceptedConnections)",
            "connections_refused=\(server.refusedConnections)",
            "reloads=\(reloads.reloads)",
            "reload_failures=\(reloads.failures)",
            "denied=\(access.denied)",
            "provider_clock_skew_s=\(Int(saturating: (stats.providerClockSkew ?? 0).rounded()))",
            "warm_fetches=\(stats.warmFetches)",
        ].joined(separator: " ") + signatureBudgetStats() + sharedMemoryStats()
    }

    /// Four fields for each kind whose provider has a signature budget: `signs_<kind>`,
    /// `sign_queued_<kind>`, `sign_throttled_<kind>`, `sign_timeouts_<kind>`; none for the others.
    private func signatureBudgetStats() -> String {
        engine.signatureBudgets().map { kind, counters in
            " signs_\(kind)=\(counters.signatures) sign_queued_\(kind)=\(counters.queued)"
                + " sign_throttled_\(kind)=\(counters.throttled) sign_timeouts_\(kind)=\(counters.timedOut)"
        }.joined()
    }

    /// The shared-memory counters, when the segments are on.
    private func sharedMemoryStats() -> String {
        guard let segments else { return " shm=off" }
        let stats = segments.statistics()
        return " shm_segments=\(stats.segments) shm_bytes=\(stats.bytes) shm_tokens=\(stats.slotsUsed)"
            + " shm_generations=\(stats.generations) shm_descriptors=\(stats.descriptors)"
            + " shm_not_mirrored=\(stats.notMirrored) shm_held_outside=\(stats.heldOutside)"
            + " shm_mapped_bytes=\(stats.mappedBytes) shm_retired_mapped=\(stats.retiredMapped)"
            + " shm_old_readers=\(stats.oldReaderRequests)"
            + " touches=\(server.touchRequests)"
    }

    /// The agent's health now (walks the cache once: for status lines and metrics, not requests).
    public func healthReport() -> HealthReport {
        health.report(engine: engine, providers: engine.providerHealth(), survey: engine.survey())
    }

    /// The `METRICS` reply: the Prometheus text exposition, then the line `# EOF`.
    public func metricsReply() -> [UInt8] {
        var bytes = metrics.exposition(of: self)
        bytes += Array((MetricsText.endLine + "\n").utf8)
        return bytes
    }

    /// A one-line summary for `systemctl status` (`STATUS=`): tokens held, hit ratio, provider
    /// errors and the last refresh failure; first, when the agent is degraded, `degraded:` and
    /// what is wrong, naming the kind.
    public func summary() -> String {
        let stats = engine.statistics()
        let report = healthReport()
        var text = report.isDegraded ? "degraded: \(report.summary); " : ""
        text += "\(stats.entries) tokens held"
        text +=
            ", hit ratio " + (stats.hits + stats.misses == 0 ? "n/a" : String(format: "%.1f%%", stats.hitRatio * 100))
        text += ", \(stats.fetchErrors) provider errors"
        text += ", \(server.openConnections) clients"
        if let at = stats.lastFailureAt, let failure = stats.lastFailure {
            text += ", last refresh failure \(Int(saturating: clock.now - at)) s ago (\(failure))"
        } else {
            text += ", no refresh failure"
        }
        return text
    }

    /// The `HELP` reply text.
    public static let helpText = WireRequest.verbs.joined(separator: " ")
}
