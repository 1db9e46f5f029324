import Synchronization
import TokenAgent

/// When the refresher (``RefreshScheduler``) last completed a pass, so the watchdog and the health
/// judge can tell it is alive. (Not the shared-memory segments' own heartbeat, `SegmentHeartbeat`,
/// which readers check.)
public final class RefresherHeartbeat: Sendable {
    private let lastBeat: Atomic<Int64>
    private let clock: any AgentClock

    /// Creates a heartbeat that counts as having beaten now.
    public init(clock: any AgentClock = SystemAgentClock()) {
        self.clock = clock
        self.lastBeat = Atomic(Int64(clock.monotonicSeconds * 1000))
    }

    /// Records a pass.
    public func beat() { lastBeat.store(Int64(clock.monotonicSeconds * 1000), ordering: .relaxed) }

    /// Seconds since the last pass.
    public var secondsSinceLastBeat: Double {
        clock.monotonicSeconds - Double(lastBeat.load(ordering: .relaxed)) / 1000
    }
}
