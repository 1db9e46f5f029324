import BuildInfo
import MetadataEndpoint
import NIOCore
import TokenAgent
import TokenWire

/// The agent's status, as it reports it: the `STATS` line, the `METRICS` exposition, the health
/// report and the one-line summary for systemd, read from the parts of the agent it was made with
/// (the engine's counters, the server's, the reloads', the access rules', the segments', health,
/// and the uptime). It reports; a connection works through its own ``ConnectionContext``.
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
    /// Whether the demo issuer runs.
    public let issuerMode: IssuerMode
    /// The cache snapshots adopted at start and written since.
    public let snapshots: SnapshotStatistics
    /// The GCE metadata endpoint's counts; `nil` when the agent serves none.
    public let metadata: MetadataStatistics?
    /// The host's credentials in force.
    public let hostIdentity: HostIdentity
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
        issuerMode: IssuerMode = IssuerMode(),
        snapshots: SnapshotStatistics = SnapshotStatistics(),
        metadata: MetadataStatistics? = nil,
        hostIdentity: HostIdentity = HostIdentity(nil),
        clock: any AgentClock = SystemAgentClock()
    ) {
        self.hostIdentity = hostIdentity
        self.issuerMode = issuerMode
        self.snapshots = snapshots
        self.metadata = metadata
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

    /// Appends the `STATS` reply to `output`: `OK entries=… hits=… misses=… fetches=…
    /// fetch_errors=… connections=… uptime_s=…`, then further counters, and LF.
    func writeStatsReply(into output: inout ByteBuffer) {
        let stats = engine.statistics()
        var text = StatsLine()
        defer { text.write(to: &output) }
        text.add("entries", stats.entries)
        text.add("hits", stats.hits)
        text.add("misses", stats.misses)
        text.add("fetches", stats.fetches)
        text.add("fetch_errors", stats.fetchErrors)
        text.add("connections", server.openConnections)
        text.add("uptime_s", uptime)
        text.add("refreshes", stats.backgroundRefreshes)
        text.add("inflight", stats.inFlight)
        text.add("served_after_failure", stats.servedAfterFailure)
        text.add("connections_total", server.acceptedConnections)
        text.add("connections_refused", server.refusedConnections)
        text.add("reloads", reloads.reloads)
        text.add("reload_failures", reloads.failures)
        text.add("reload_changes", text: reloads.lastChanges)
        text.add("reload_error", text: reloads.lastRefusal)
        text.add("denied", access.denied)
        text.add("provider_clock_skew_s", Int(saturating: (stats.providerClockSkew ?? 0).rounded()))
        text.add("warm_fetches", stats.warmFetches)
        text.add("demo", issuerMode.isDemo ? 1 : 0)
        text.add("version", text: BuildInfo.version)
        text.add("host_identity", text: hostIdentity.current.map { StatsText.encode($0.summary) } ?? StatsWord.none)
        let snapshot = snapshots.counts
        text.add("snapshot_adopted", snapshot.adoption.adopted)
        text.add("snapshot_skipped", snapshot.adoption.total - snapshot.adoption.adopted)
        text.add("snapshot_writes", snapshot.writes)
        text.add("snapshot_write_failures", snapshot.failureCount)
        text.add("snapshot_written_at", Int(saturating: (snapshot.lastWrite?.endedAt ?? 0).rounded(.down)))
        text.add("snapshot_bytes", snapshot.lastWrite?.bytes ?? 0)
        text.add("snapshot_tokens", snapshot.lastWrite?.tokens ?? 0)
        text.add("snapshot_write_ms", Int(saturating: ((snapshot.lastWrite?.duration ?? 0) * 1000).rounded()))
        text.add("snapshot_file", text: StatsWord.encode(snapshots.file))
        text.add("snapshot_source", text: snapshot.adoptedFrom ?? StatsWord.none)
        writeMetadataFields(into: &text)
        // Four fields for each kind whose provider has a signature budget; none for the others.
        for (kind, counters) in engine.signatureBudgets() {
            text.add("signs_", kind: kind, counters.signatures)
            text.add("sign_queued_", kind: kind, counters.queued)
            text.add("sign_throttled_", kind: kind, counters.throttled)
            text.add("sign_timeouts_", kind: kind, counters.timedOut)
        }
        guard let segments else {
            text.add("shm", text: "off")
            return
        }
        let shared = segments.statistics()
        text.add("shm_segments", shared.segments)
        text.add("shm_bytes", shared.bytes)
        text.add("shm_tokens", shared.slotsUsed)
        text.add("shm_generations", shared.generations)
        text.add("shm_descriptors", shared.descriptors)
        text.add("shm_not_mirrored", shared.notMirrored)
        text.add("shm_held_outside", shared.heldOutside)
        text.add("shm_mapped_bytes", shared.mappedBytes)
        text.add("shm_retired_mapped", shared.retiredMapped)
        text.add("touches", server.touchRequests)
    }

    /// `metadata_listen`, the endpoint's address, and its counts; `metadata_listen=-` alone when
    /// the agent serves no endpoint.
    private func writeMetadataFields(into text: inout StatsLine) {
        guard let metadata else {
            text.add("metadata_listen", text: StatsWord.none)
            return
        }
        let counts = metadata.counts
        text.add("metadata_listen", text: counts.listen.description)
        for outcome in MetadataOutcome.allCases {
            text.add("metadata_", kind: outcome.label, counts.answers(outcome))
        }
        text.add("metadata_connections", counts.open)
        text.add("metadata_connections_total", counts.accepted)
        text.add("metadata_connections_refused", counts.refused)
        for closure in MetadataStatistics.Closure.allCases {
            text.add("metadata_", kind: closure.label, counts.closed(closure))
        }
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
    /// what is wrong, naming the kind. While the agent waits for a configuration, only
    /// `waiting for configuration:` and what to configure.
    public func summary() -> String {
        if let waiting = access.waitingForConfiguration { return "waiting for configuration: \(waiting)" }
        let stats = engine.statistics()
        let report = healthReport()
        var text = report.isDegraded ? "degraded: \(report.summary); " : ""
        text += "\(stats.entries) tokens held"
        text +=
            ", hit ratio "
            + (stats.hits + stats.misses == 0 ? "n/a" : DecimalText.fixed(stats.hitRatio * 100, digits: 1) + "%")
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
