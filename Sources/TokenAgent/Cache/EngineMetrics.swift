import CoreMetrics

/// The metrics the engine records as things happen, through swift-metrics: how long fetches take,
/// why they fail, and how many requests join a fetch already in flight. Everything the engine
/// counts anyway (hits, misses, entries, fetches) is read from ``EngineStatistics`` when metrics
/// are collected instead, so a cache hit records nothing here.
///
/// Labels are kinds and reasons only, never ids or tokens. The instruments come from `factory`
/// (the agent passes its Prometheus registry's; the default records nothing).
public struct EngineMetrics: Sendable {
    /// The metric names, as exported.
    public enum Name {
        /// Histogram of fetch durations at the provider, seconds, by `kind`.
        public static let fetchDuration = "fleet_tokend_fetch_duration_seconds"
        /// Counter of failed fetches by `kind` and `reason` (``FetchFailureReason``).
        public static let fetchErrors = "fleet_tokend_fetch_errors_total"
        /// Counter of requests that joined a fetch already in flight for their key.
        public static let singleflightWaiters = "fleet_tokend_singleflight_waiters_total"
    }

    private let factory: any MetricsFactory
    private let waiters: Counter

    /// Metrics made by `factory`.
    public init(factory: any MetricsFactory = NOOPMetricsHandler.instance) {
        self.factory = factory
        self.waiters = Counter(label: Name.singleflightWaiters, dimensions: [], factory: factory)
    }

    /// Creates the series of `kinds` at zero, so they are exported before anything happens (an
    /// alert on `increase()` needs the zero).
    func prepare(kinds: some Sequence<String>) {
        for kind in kinds {
            _ = CoreMetrics.Timer(label: Name.fetchDuration, dimensions: [("kind", kind)], factory: factory)
            for reason in FetchFailureReason.allCases {
                _ = Counter(
                    label: Name.fetchErrors,
                    dimensions: [("kind", kind), ("reason", reason.rawValue)],
                    factory: factory
                )
            }
        }
    }

    /// Records a fetch of `kind` that took `nanoseconds` at the provider, whatever its outcome.
    func recordFetch(kind: String, nanoseconds: Int64) {
        CoreMetrics.Timer(label: Name.fetchDuration, dimensions: [("kind", kind)], factory: factory)
            .recordNanoseconds(nanoseconds)
    }

    /// Records a failed fetch of `kind`.
    func recordFailure(kind: String, reason: FetchFailureReason) {
        Counter(label: Name.fetchErrors, dimensions: [("kind", kind), ("reason", reason.rawValue)], factory: factory)
            .increment()
    }

    /// Records a request that joined a fetch in flight.
    func recordWaiter() { waiters.increment() }
}
