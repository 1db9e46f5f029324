/// How one kind's provider has been doing, from the outcomes of its fetches.
///
/// A kind's provider is failing from the first failed fetch after its last successful one, until
/// its next successful one. Refusals of an id (`rejected`: HTTP 4xx, a claim naming another id)
/// are the id's problem, not the provider's, and do not make it failing; they are still the last
/// error. A reload that changes the kind's provider starts the record afresh.
public struct ProviderHealth: Sendable, Hashable {
    /// The kind.
    public var kind: String
    /// The first failure of the current run of failures; `nil` while the provider is not failing.
    public var failingSince: MonotonicInstant?
    /// The last failure of any kind.
    public var lastFailureAt: MonotonicInstant?
    /// The last failure's text (never a secret).
    public var lastFailure: String?
    /// The last failure's reason.
    public var lastFailureReason: FetchFailureReason?
    /// The last successful fetch.
    public var lastSuccessAt: MonotonicInstant?
    /// Fetches that failed in a row (refusals not counted).
    public var consecutiveFailures = 0
    /// Whether a failure since the last successful fetch needs the operator (a signer's permission
    /// or account, refused credentials: ``ProviderError/misconfigured(_:retryAfter:)``). Such a
    /// kind is degraded at once, not after `degraded_after`.
    public var needsOperator = false

    /// A record of `kind` with nothing seen yet.
    public init(kind: String) { self.kind = kind }

    /// Seconds the provider has been failing at `now`, or `nil` when it is not: not failing, or
    /// its last failure is older than `forgetAfter` (no fetch since tells nothing new; the agent's
    /// idle time-out).
    public func failingFor(now: MonotonicInstant, forgetAfter: Double) -> Double? {
        guard let failingSince, let lastFailureAt, now - lastFailureAt <= forgetAfter else { return nil }
        return max(0, now - failingSince)
    }

    /// Records a fetch that stored a token.
    mutating func recordSuccess(at now: MonotonicInstant) {
        lastSuccessAt = now
        failingSince = nil
        consecutiveFailures = 0
        needsOperator = false
    }

    /// Records a failed fetch.
    mutating func recordFailure(_ error: ProviderError, at now: MonotonicInstant) {
        lastFailureAt = now
        lastFailure = "\(error)"
        lastFailureReason = FetchFailureReason(error)
        if case .rejected = error { return }
        if case .misconfigured = error { needsOperator = true }
        consecutiveFailures += 1
        if failingSince == nil { failingSince = now }
    }
}
