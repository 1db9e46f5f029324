/// When the agent calls itself degraded or its refresher stalled.
public struct HealthSettings: Sendable, Hashable {
    /// A kind whose provider has been failing for longer than this, seconds, makes the agent
    /// degraded (`degraded_after`, default 120).
    public var degradedAfter: Double = 120
    /// The refresher counts as stalled when it has not completed a pass for this long, seconds
    /// (`refresher_stall_after`, default 10): `PING` then answers `ERR unavailable refresher
    /// stalled` and the watchdog stops pinging.
    public var refresherStallAfter: Double = 10

    /// The defaults, or the given values.
    public init(degradedAfter: Double = 120, refresherStallAfter: Double = 10) {
        self.degradedAfter = degradedAfter
        self.refresherStallAfter = refresherStallAfter
    }
}
