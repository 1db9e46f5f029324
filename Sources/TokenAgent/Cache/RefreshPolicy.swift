/// When to serve, refresh, retry and forget a token. Pure arithmetic on seconds; the caller
/// supplies the clock readings and the random numbers, so hour-long lifetimes test instantly.
public struct RefreshPolicy: Sendable, Hashable {
    /// How long before expiry a background refresh aims to happen (`--refresh-margin`).
    public var refreshMargin: Double
    /// The default minimum validity of a served token (`--min-validity`).
    public var minValidity: Double
    /// An entry not read for this long is no longer refreshed (`--idle-timeout`).
    public var idleTimeout: Double
    /// A token with less than this left is never served.
    public var servingFloor: Double = 10
    /// The largest jitter, as a fraction of the time until the planned refresh.
    public var jitterFraction: Double = 0.1
    /// A token fetched this recently is not fetched again (REFRESH, or a GET asking for more
    /// validity than any token has).
    public var refetchGuard: Double = 5
    /// How long a provider's refusal of an id is remembered.
    public var rejectionMemory: Double = 5
    /// The first back-off step after a provider failure.
    public var backoffBase: Double = 1
    /// The longest back-off step.
    public var backoffCap: Double = 60
    /// The longest wait a provider's `Retry-After` can impose.
    public var retryAfterCap: Double = 300

    /// Creates a policy with the given settings (the defaults are the agent's).
    public init(refreshMargin: Double = 600, minValidity: Double = 300, idleTimeout: Double = 600) {
        self.refreshMargin = refreshMargin
        self.minValidity = minValidity
        self.idleTimeout = idleTimeout
    }

    /// The minimum validity a GET needs: the request's own, or the default capped at a quarter of
    /// the token's lifetime so short-lived tokens still cache. Never below the serving floor.
    public func requiredValidity(lifetime: Double, requested: Double?) -> Double {
        let required = requested ?? min(minValidity, lifetime / 4)
        return max(required, servingFloor)
    }

    /// When a token fetched at `fetchedAt` and expiring at `expiry` should be refreshed: at
    /// `fetched + max(lifetime/2, lifetime - margin)`, but no later than the moment it stops
    /// being servable (`fetched + lifetime - servingFloor`), moved earlier by `jitterUnit` (0..<1)
    /// times 10% of the time until then.
    public func refreshTime(
        fetchedAt: MonotonicInstant,
        expiry: MonotonicInstant,
        jitterUnit: Double
    ) -> MonotonicInstant {
        let lifetime = max(0, expiry - fetchedAt)
        let untilRefresh = max(0, min(max(lifetime / 2, lifetime - refreshMargin), lifetime - servingFloor))
        let jitter = jitterUnit * jitterFraction * untilRefresh
        return fetchedAt + (untilRefresh - jitter)
    }

    /// This policy for tokens that must have `floor` seconds left to be served (access tokens):
    /// the serving floor raised to it, and the refresh margin to at least a minute more, so that a
    /// token is refreshed before it stops being served.
    public func raisingServingFloor(to floor: Double) -> RefreshPolicy {
        var raised = self
        raised.servingFloor = max(servingFloor, floor)
        raised.refreshMargin = max(refreshMargin, raised.servingFloor + 60)
        return raised
    }

    /// The back-off after `failures` consecutive provider failures (1 or more): full jitter over
    /// `min(cap, base * 2^(failures-1))`, never below 0.1 s so a failing key is not hammered.
    public func backoff(failures: Int, jitterUnit: Double) -> Double {
        let exponent = Double(min(max(failures - 1, 0), 30))
        let ceiling = min(backoffCap, backoffBase * pow2(exponent))
        return max(0.1, jitterUnit * ceiling)
    }

    /// Whether a token with `remaining` seconds left may be served at all.
    public func isServable(remaining: Double) -> Bool { remaining >= servingFloor }

    /// Whether an entry last read at `lastRead` still earns background refreshes at `now`.
    public func isActive(lastRead: MonotonicInstant, now: MonotonicInstant) -> Bool { now - lastRead <= idleTimeout }

    private func pow2(_ exponent: Double) -> Double {
        var value = 1.0
        for _ in 0..<Int(exponent) { value *= 2 }
        return value
    }
}
