import TokenAgent

/// Every metric the agent exports: its name, type and meaning, in one table. The HELP lines of the
/// exposition come from here, and a test checks that docs/OPERATIONS.md lists every name.
public enum MetricCatalog {
    /// A metric's Prometheus type.
    public enum Kind: String, Sendable {
        case counter, gauge, histogram
    }

    /// One metric.
    public struct Entry: Sendable {
        /// The exported name.
        public var name: String
        /// Its type.
        public var kind: Kind
        /// Its labels.
        public var labels: [String]
        /// What it means (the HELP line).
        public var help: String
    }

    /// Every metric, in the order docs/OPERATIONS.md lists them.
    public static let entries: [Entry] = [
        Entry(
            name: "fleet_tokend_requests_total",
            kind: .counter,
            labels: ["verb", "code"],
            help: "Requests answered, by verb and result code (ok or the ERR code)."
        ),
        Entry(
            name: "fleet_tokend_cache_hits_total",
            kind: .counter,
            labels: [],
            help: "GETs answered from the cache without waiting for a fetch."
        ),
        Entry(
            name: "fleet_tokend_cache_misses_total",
            kind: .counter,
            labels: [],
            help: "GETs that waited for a fetch."
        ),
        Entry(
            name: "fleet_tokend_stale_serves_total",
            kind: .counter,
            labels: [],
            help: "GETs answered with the cached token because the fetch for a fresher one failed."
        ),
        Entry(
            name: "fleet_tokend_entries",
            kind: .gauge,
            labels: ["kind"],
            help: "Cache entries held: keys with a token and keys that only remember failures."
        ),
        Entry(
            name: "fleet_tokend_soonest_expiry_seconds",
            kind: .gauge,
            labels: ["kind"],
            help: "Seconds until the soonest expiry among the tokens read within the idle time-out."
        ),
        Entry(
            name: "fleet_tokend_late_refresh_tokens",
            kind: .gauge,
            labels: ["kind"],
            help: "Tokens read within the idle time-out with less time left than a default GET requires."
        ),
        Entry(
            name: "fleet_tokend_fetches_total",
            kind: .counter,
            labels: [],
            help: "Fetches started at a provider (GET misses, REFRESH, background refreshes)."
        ),
        Entry(
            name: "fleet_tokend_background_refreshes_total",
            kind: .counter,
            labels: [],
            help: "Background refreshes started (also counted in fleet_tokend_fetches_total)."
        ),
        Entry(
            name: "fleet_tokend_fetches_in_flight",
            kind: .gauge,
            labels: [],
            help: "Fetches in flight, running or waiting for a concurrent-fetch place."
        ),
        Entry(
            name: "fleet_tokend_warm_fetches_total",
            kind: .counter,
            labels: [],
            help: "Fetches started by WARM (also counted in fleet_tokend_fetches_total)."
        ),
        Entry(
            name: "fleet_tokend_signatures_total",
            kind: .counter,
            labels: ["kind"],
            help: "Permits the kind's signature budget granted: signatures made (kinds with a budget only)."
        ),
        Entry(
            name: "fleet_tokend_signature_waiters",
            kind: .gauge,
            labels: ["kind"],
            help: "Fetches waiting for a permit of the kind's signature budget."
        ),
        Entry(
            name: "fleet_tokend_signature_throttled_total",
            kind: .counter,
            labels: ["kind"],
            help: "Fetches that found the kind's signature budget spent and had to wait for a permit."
        ),
        Entry(
            name: "fleet_tokend_signature_timeouts_total",
            kind: .counter,
            labels: ["kind"],
            help: "Fetches for requests that got no permit of the signature budget in time (ERR busy)."
        ),
        Entry(
            name: EngineMetrics.Name.fetchDuration,
            kind: .histogram,
            labels: ["kind"],
            help: "Time a fetch took at the provider, whatever its outcome."
        ),
        Entry(
            name: EngineMetrics.Name.fetchErrors,
            kind: .counter,
            labels: ["kind", "reason"],
            help: "Failed or refused fetches, by reason."
        ),
        Entry(
            name: EngineMetrics.Name.singleflightWaiters,
            kind: .counter,
            labels: [],
            help: "Requests that joined a fetch already in flight for their key."
        ),
        Entry(
            name: "fleet_tokend_provider_failing_seconds",
            kind: .gauge,
            labels: ["kind"],
            help: "Seconds the kind's provider has been failing (0 when it is not)."
        ),
        Entry(
            name: "fleet_tokend_provider_last_failure_timestamp_seconds",
            kind: .gauge,
            labels: ["kind", "reason"],
            help: "Unix time of the kind's last fetch failure of each reason."
        ),
        Entry(
            name: "fleet_tokend_provider_clock_skew_seconds",
            kind: .gauge,
            labels: ["kind"],
            help: "The provider's clock minus the agent's, from the Date header of its last reply."
        ),
        Entry(
            name: "fleet_tokend_denied_total",
            kind: .counter,
            labels: ["kind"],
            help: "Requests refused by the access rules, by kind (admin for operator verbs)."
        ),
        Entry(
            name: "fleet_tokend_shm_segments",
            kind: .gauge,
            labels: [],
            help: "Shared-memory segments in force (one per kind; absent when shared memory is off)."
        ),
        Entry(
            name: "fleet_tokend_shm_bytes",
            kind: .gauge,
            labels: [],
            help: "Bytes of the shared-memory segments in force."
        ),
        Entry(
            name: "fleet_tokend_shm_tokens",
            kind: .gauge,
            labels: [],
            help: "Tokens held in the shared-memory segments (slots in use)."
        ),
        Entry(
            name: "fleet_tokend_shm_generations_total",
            kind: .counter,
            labels: [],
            help: "Shared-memory segments made: at start, growth, rotation and rule changes."
        ),
        Entry(
            name: "fleet_tokend_shm_descriptors_total",
            kind: .counter,
            labels: [],
            help: "Segment descriptors handed out (SHM)."
        ),
        Entry(
            name: "fleet_tokend_shm_not_mirrored_total",
            kind: .counter,
            labels: [],
            help: "Tokens left out of shared memory (a segment limit, or larger than the largest slot)."
        ),
        Entry(
            name: "fleet_tokend_shm_held_outside",
            kind: .gauge,
            labels: [],
            help: "Tokens of kinds a limit left without a segment for now, held privately until one is made."
        ),
        Entry(
            name: "fleet_tokend_shm_mapped_bytes",
            kind: .gauge,
            labels: [],
            help:
                "Bytes of every segment generation that may still be mapped: current, and retired ones a reader holds."
        ),
        Entry(
            name: "fleet_tokend_shm_retired_mapped",
            kind: .gauge,
            labels: [],
            help: "Retired segment generations a reader still holds (descriptor or mapping)."
        ),
        Entry(
            name: "fleet_tokend_touch_requests_total",
            kind: .counter,
            labels: [],
            help: "TOUCH lines counted: keys reported read through shared memory."
        ),
        Entry(
            name: "fleet_tokend_snapshot_adopted_tokens",
            kind: .gauge,
            labels: ["outcome"],
            help:
                "Tokens of the cache snapshot read at start, by outcome (adopted, changed_provider, expired, refused)."
        ),
        Entry(
            name: "fleet_tokend_snapshot_writes_total",
            kind: .counter,
            labels: [],
            help: "Cache snapshots written to every destination (cache file, fd store)."
        ),
        Entry(
            name: "fleet_tokend_snapshot_write_failures_total",
            kind: .counter,
            labels: ["destination"],
            help: "Cache snapshot writes that failed, by destination (file, fd_store)."
        ),
        Entry(
            name: "fleet_tokend_snapshot_last_write_timestamp_seconds",
            kind: .gauge,
            labels: [],
            help: "Unix time the last cache snapshot was written (0: none yet)."
        ),
        Entry(
            name: "fleet_tokend_snapshot_last_write_bytes",
            kind: .gauge,
            labels: [],
            help: "Bytes of the last cache snapshot written."
        ),
        Entry(
            name: "fleet_tokend_snapshot_last_write_tokens",
            kind: .gauge,
            labels: [],
            help: "Tokens in the last cache snapshot written."
        ),
        Entry(
            name: "fleet_tokend_snapshot_last_write_duration_seconds",
            kind: .gauge,
            labels: [],
            help: "How long the last cache snapshot took: export, encoding and every destination's write."
        ),
        Entry(
            name: "fleet_tokend_connections_open",
            kind: .gauge,
            labels: [],
            help: "Client connections open."
        ),
        Entry(
            name: "fleet_tokend_connections_total",
            kind: .counter,
            labels: [],
            help: "Client connections admitted since start."
        ),
        Entry(
            name: "fleet_tokend_connections_refused_total",
            kind: .counter,
            labels: [],
            help: "Client connections refused at the connection limits."
        ),
        Entry(
            name: "fleet_tokend_metadata_requests_total",
            kind: .counter,
            labels: ["code", "outcome"],
            help: "GCE metadata endpoint answers, by status and outcome (tokens, ok, refused_<check>, ...)."
        ),
        Entry(
            name: "fleet_tokend_metadata_connections_open",
            kind: .gauge,
            labels: [],
            help: "GCE metadata endpoint connections open."
        ),
        Entry(
            name: "fleet_tokend_metadata_connections_total",
            kind: .counter,
            labels: [],
            help: "GCE metadata endpoint connections admitted."
        ),
        Entry(
            name: "fleet_tokend_metadata_connections_refused_total",
            kind: .counter,
            labels: [],
            help: "GCE metadata endpoint connections refused at the cap, every open one being answered."
        ),
        Entry(
            name: "fleet_tokend_metadata_connections_closed_total",
            kind: .counter,
            labels: ["reason"],
            help: "GCE metadata endpoint connections it closed: evicted, head_timeout, idle_timeout, too_large, "
                + "request_timeout."
        ),
        Entry(
            name: "fleet_tokend_sts_calls_total",
            kind: .counter,
            labels: [],
            help: "STS token exchanges of the host's federated identity (Workload Identity Federation)."
        ),
        Entry(
            name: "fleet_tokend_sts_failures_total",
            kind: .counter,
            labels: ["reason"],
            help: "Failed STS exchanges: subject_token, refused, throttled, unavailable, bad_reply."
        ),
        Entry(
            name: "fleet_tokend_sts_backoffs_total",
            kind: .counter,
            labels: [],
            help: "Back-offs started after STS answered 429 or 5xx or could not be reached."
        ),
        Entry(
            name: "fleet_tokend_impersonation_calls_total",
            kind: .counter,
            labels: [],
            help: "generateAccessToken calls impersonating the federated identity's service account."
        ),
        Entry(
            name: "fleet_tokend_impersonation_failures_total",
            kind: .counter,
            labels: ["reason"],
            help: "Failed impersonations: refused, throttled, unavailable, bad_reply."
        ),
        Entry(
            name: "fleet_tokend_reloads_total",
            kind: .counter,
            labels: ["outcome"],
            help: "Configuration reloads, applied or refused."
        ),
        Entry(
            name: "fleet_tokend_last_reload_success",
            kind: .gauge,
            labels: [],
            help: "1 when the last reload was applied (or none was tried), 0 when it was refused."
        ),
        Entry(
            name: "fleet_tokend_refresher_last_pass_age_seconds",
            kind: .gauge,
            labels: [],
            help: "Seconds since the background refresher last completed a pass."
        ),
        Entry(
            name: "fleet_tokend_degraded",
            kind: .gauge,
            labels: ["kind", "reason"],
            help:
                "1 when the kind makes the agent degraded for the reason (provider_failing, misconfigured, "
                + "expiry_soon)."
        ),
        Entry(
            name: "fleet_tokend_healthy",
            kind: .gauge,
            labels: [],
            help: "1 when the agent is serving and not degraded, 0 otherwise."
        ),
        Entry(
            name: "fleet_tokend_build_info",
            kind: .gauge,
            labels: ["version", "commit"],
            help: "Always 1; the labels name the running agent's version and the commit it was built from."
        ),
        Entry(
            name: "fleet_tokend_demo_issuer",
            kind: .gauge,
            labels: [],
            help: "1 when the agent runs its demo issuer, whose tokens Fleet Engine refuses; 0 otherwise."
        ),
        Entry(
            name: "fleet_tokend_uptime_seconds",
            kind: .gauge,
            labels: [],
            help: "Seconds since the agent started."
        ),
    ]

    private static let helpByName = Dictionary(uniqueKeysWithValues: entries.map { ($0.name, $0.help) })

    /// The HELP text of `name`; empty for a metric not in the table.
    public static func help(_ name: String) -> String { helpByName[name] ?? "" }
}
