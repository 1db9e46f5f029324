import BuildInfo
import CoreMetrics
import MetadataEndpoint
import Prometheus
import Synchronization
import TokenAgent
import TokenWire

/// The agent's metrics: a Prometheus registry fed through swift-metrics, exported as the
/// Prometheus text exposition (the `METRICS` verb and the optional HTTP listener).
///
/// Two kinds of instruments feed it. Events that are rare or already slow (fetch durations and
/// failures, singleflight joins) and replies (``RequestCounters``, pre-made so counting a cached
/// GET's reply allocates nothing) are recorded as they happen. What the agent already counts for
/// `STATS` (hits, misses, entries, connections, reloads, denials) is copied into swift-metrics
/// counters and gauges when the metrics are collected, so the hot path pays nothing more for it.
public final class AgentMetrics: Sendable {
    /// The registry every instrument lives in.
    public let registry: PrometheusCollectorRegistry
    /// The swift-metrics factory over ``registry``.
    public let factory: any MetricsFactory
    /// The reply counters.
    let requests: RequestCounters
    private let collected = Mutex(CollectedState())

    /// What the last collection exported: counter totals (to add only the difference) and the
    /// label sets of gauges that may have to go.
    private struct CollectedState {
        var totals: [String: Int] = [:]
        /// The instruments made so far, by series (name and labels): a collection finds each
        /// in one lookup instead of asking the registry, which validates its HELP text again.
        var counters: [String: CoreMetrics.Counter] = [:]
        var meters: [String: CoreMetrics.Meter] = [:]
        var soonestExpiryKinds: Set<String> = []

        static func series(_ name: String, _ labels: [(String, String)]) -> String {
            labels.reduce(into: name) { key, label in key += "\u{1}\(label.0)=\(label.1)" }
        }

        /// The instrument of series `key` in `made`, made by `make` the first time.
        static func instrument<Instrument>(
            _ key: String,
            in made: inout [String: Instrument],
            _ make: () -> Instrument
        ) -> Instrument {
            if let instrument = made[key] { return instrument }
            let instrument = make()
            made[key] = instrument
            return instrument
        }
    }

    /// An empty registry.
    public init() {
        let registry = PrometheusCollectorRegistry()
        self.registry = registry
        self.factory = CatalogMetricsFactory(registry: registry)
        self.requests = RequestCounters(factory: factory)
    }

    /// The instruments the engine records into.
    public var engineMetrics: EngineMetrics { EngineMetrics(factory: factory) }

    /// The exposition after collecting `status`: Prometheus text format 0.0.4, without the
    /// `# EOF` line that frames it on the socket.
    public func exposition(of status: AgentStatus) -> [UInt8] {
        collect(status)
        var buffer: [UInt8] = []
        buffer.reserveCapacity(16 * 1024)
        registry.emit(into: &buffer)
        return buffer
    }

    /// Copies the counters `status` reads into the registry.
    func collect(_ status: AgentStatus) {
        let engine = status.engine
        let stats = engine.statistics()
        let survey = engine.survey()
        let providers = engine.providerHealth()
        let health = status.health.report(engine: engine, providers: providers, survey: survey)
        let now = engine.now
        let unixNow = Double(status.clock.wallSeconds)
        collected.withLock { state in
            func counter(_ name: String, _ labels: [(String, String)] = [], total: Int) {
                let key = CollectedState.series(name, labels)
                let previous = state.totals[key] ?? 0
                let counter = CollectedState.instrument(key, in: &state.counters) {
                    Counter(label: name, dimensions: labels, factory: factory)
                }
                if total > previous {
                    counter.increment(by: total - previous)
                    state.totals[key] = total
                }
            }
            func gauge(_ name: String, _ labels: [(String, String)], _ value: Double) {
                let key = CollectedState.series(name, labels)
                let meter = CollectedState.instrument(key, in: &state.meters) {
                    Meter(label: name, dimensions: labels, factory: factory)
                }
                meter.set(value)
            }
            counter("fleet_tokend_cache_hits_total", total: stats.hits)
            counter("fleet_tokend_cache_misses_total", total: stats.misses)
            counter("fleet_tokend_stale_serves_total", total: stats.servedAfterFailure)
            counter("fleet_tokend_fetches_total", total: stats.fetches)
            counter("fleet_tokend_background_refreshes_total", total: stats.backgroundRefreshes)
            gauge("fleet_tokend_fetches_in_flight", [], Double(stats.inFlight))
            counter("fleet_tokend_warm_fetches_total", total: stats.warmFetches)
            for (kind, budget) in engine.signatureBudgets() {
                counter("fleet_tokend_signatures_total", [("kind", kind)], total: budget.signatures)
                gauge("fleet_tokend_signature_waiters", [("kind", kind)], Double(budget.queued))
                counter("fleet_tokend_signature_throttled_total", [("kind", kind)], total: budget.throttled)
                counter("fleet_tokend_signature_timeouts_total", [("kind", kind)], total: budget.timedOut)
            }
            var soonestKinds: Set<String> = []
            for kind in survey {
                gauge("fleet_tokend_entries", [("kind", kind.kind)], Double(kind.entries))
                gauge(
                    "fleet_tokend_late_refresh_tokens",
                    [("kind", kind.kind)],
                    Double(kind.activeBelowMinimumValidity)
                )
                if let soonest = kind.soonestActiveExpiry {
                    gauge("fleet_tokend_soonest_expiry_seconds", [("kind", kind.kind)], soonest)
                    soonestKinds.insert(kind.kind)
                }
            }
            // A kind with no token in use has no soonest expiry: its series goes.
            for kind in state.soonestExpiryKinds.subtracting(soonestKinds) {
                let key = CollectedState.series("fleet_tokend_soonest_expiry_seconds", [("kind", kind)])
                state.meters.removeValue(forKey: key)?.destroy()
            }
            state.soonestExpiryKinds = soonestKinds
            let skews = engine.providers.mapValues(\.clockSkew)
            for provider in providers {
                let failing = provider.failingFor(now: now, forgetAfter: engine.policy.idleTimeout) ?? 0
                gauge("fleet_tokend_provider_failing_seconds", [("kind", provider.kind)], failing)
                if let at = provider.lastFailureAt, let reason = provider.lastFailureReason {
                    gauge(
                        "fleet_tokend_provider_last_failure_timestamp_seconds",
                        [("kind", provider.kind), ("reason", reason.rawValue)],
                        (unixNow - (now - at)).rounded()
                    )
                }
                if let skew = skews[provider.kind] ?? nil {
                    gauge("fleet_tokend_provider_clock_skew_seconds", [("kind", provider.kind)], skew.rounded())
                }
                for reason in HealthReport.Reason.allCases {
                    let degraded = health.problems.contains { $0.kind == provider.kind && $0.reason == reason }
                    gauge(
                        "fleet_tokend_degraded",
                        [("kind", provider.kind), ("reason", reason.rawValue)],
                        degraded ? 1 : 0
                    )
                }
            }
            let denied = status.access.deniedPerKind
            for kind in Set(engine.kinds).union(["admin"]).union(denied.keys) {
                counter("fleet_tokend_denied_total", [("kind", kind)], total: denied[kind] ?? 0)
            }
            let snapshot = status.snapshots.counts
            let adoption = snapshot.adoption
            for (outcome, count) in [
                ("adopted", adoption.adopted), ("changed_provider", adoption.changedProvider),
                ("expired", adoption.expired), ("refused", adoption.refused),
            ] {
                gauge("fleet_tokend_snapshot_adopted_tokens", [("outcome", outcome)], Double(count))
            }
            counter("fleet_tokend_snapshot_writes_total", total: snapshot.writes)
            for (destination, failures) in snapshot.failures {
                counter("fleet_tokend_snapshot_write_failures_total", [("destination", destination)], total: failures)
            }
            gauge(
                "fleet_tokend_snapshot_last_write_timestamp_seconds",
                [],
                (snapshot.lastWrite?.endedAt ?? 0).rounded()
            )
            gauge("fleet_tokend_snapshot_last_write_bytes", [], Double(snapshot.lastWrite?.bytes ?? 0))
            gauge("fleet_tokend_snapshot_last_write_tokens", [], Double(snapshot.lastWrite?.tokens ?? 0))
            gauge("fleet_tokend_snapshot_last_write_duration_seconds", [], snapshot.lastWrite?.duration ?? 0)
            gauge("fleet_tokend_connections_open", [], Double(status.server.openConnections))
            counter("fleet_tokend_connections_total", total: status.server.acceptedConnections)
            counter("fleet_tokend_connections_refused_total", total: status.server.refusedConnections)
            counter("fleet_tokend_reloads_total", [("outcome", "applied")], total: status.reloads.reloads)
            counter("fleet_tokend_reloads_total", [("outcome", "refused")], total: status.reloads.failures)
            gauge("fleet_tokend_last_reload_success", [], status.reloads.lastApplied == false ? 0 : 1)
            gauge(
                "fleet_tokend_refresher_last_pass_age_seconds",
                [],
                status.health.heartbeat.map { $0.secondsSinceLastBeat.rounded() } ?? 0
            )
            if let segments = status.segments {
                let shared = segments.statistics()
                gauge("fleet_tokend_shm_segments", [], Double(shared.segments))
                gauge("fleet_tokend_shm_bytes", [], Double(shared.bytes))
                gauge("fleet_tokend_shm_tokens", [], Double(shared.slotsUsed))
                counter("fleet_tokend_shm_generations_total", total: shared.generations)
                counter("fleet_tokend_shm_descriptors_total", total: shared.descriptors)
                counter("fleet_tokend_shm_not_mirrored_total", total: shared.notMirrored)
                gauge("fleet_tokend_shm_held_outside", [], Double(shared.heldOutside))
                gauge("fleet_tokend_shm_mapped_bytes", [], Double(shared.mappedBytes))
                gauge("fleet_tokend_shm_retired_mapped", [], Double(shared.retiredMapped))
                counter("fleet_tokend_touch_requests_total", total: status.server.touchRequests)
            }
            if let metadata = status.metadata?.counts {
                for outcome in MetadataOutcome.allCases {
                    counter(
                        "fleet_tokend_metadata_requests_total",
                        [("code", String(outcome.status)), ("outcome", outcome.label)],
                        total: metadata.answers(outcome)
                    )
                }
                gauge("fleet_tokend_metadata_connections_open", [], Double(metadata.open))
                counter("fleet_tokend_metadata_connections_total", total: metadata.accepted)
                counter("fleet_tokend_metadata_connections_refused_total", total: metadata.refused)
                for closure in MetadataStatistics.Closure.allCases {
                    counter(
                        "fleet_tokend_metadata_connections_closed_total",
                        [("reason", closure.label)],
                        total: metadata.closed(closure)
                    )
                }
            }
            if let federation = status.hostIdentity.federationTotals {
                counter("fleet_tokend_sts_calls_total", total: federation.stsCalls)
                counter("fleet_tokend_sts_backoffs_total", total: federation.stsBackoffs)
                counter("fleet_tokend_impersonation_calls_total", total: federation.impersonationCalls)
                for reason in FederationStatistics.Reason.allCases {
                    counter(
                        "fleet_tokend_sts_failures_total",
                        [("reason", reason.rawValue)],
                        total: federation.stsFailures[reason] ?? 0
                    )
                    if reason != .subjectToken {
                        counter(
                            "fleet_tokend_impersonation_failures_total",
                            [("reason", reason.rawValue)],
                            total: federation.impersonationFailures[reason] ?? 0
                        )
                    }
                }
            }
            gauge("fleet_tokend_healthy", [], health.isDegraded ? 0 : 1)
            gauge("fleet_tokend_demo_issuer", [], status.issuerMode.isDemo ? 1 : 0)
            gauge("fleet_tokend_build_info", [("version", BuildInfo.version), ("commit", BuildInfo.commit)], 1)
            gauge("fleet_tokend_uptime_seconds", [], Double(status.uptime))
        }
    }
}
