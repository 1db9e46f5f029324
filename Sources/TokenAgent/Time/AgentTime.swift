import TokenWire

/// An instant on the agent's monotonic clock (`CLOCK_BOOTTIME` on Linux): seconds since boot,
/// counting through suspend. Only differences between instants mean anything; every deadline of
/// the engine (refresh, back-off, idle, expiry as the agent judges it) is one of these.
public struct MonotonicInstant: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Seconds on the monotonic clock.
    public var seconds: Double

    /// The instant `seconds` on the monotonic clock.
    public init(seconds: Double) { self.seconds = seconds }

    /// Before any instant the clock reads: "long ago", for deadlines that never held.
    public static let origin = MonotonicInstant(seconds: 0)

    public static func < (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Bool { lhs.seconds < rhs.seconds }

    /// The instant `seconds` later.
    public static func + (instant: MonotonicInstant, seconds: Double) -> MonotonicInstant {
        MonotonicInstant(seconds: instant.seconds + seconds)
    }

    /// The instant `seconds` earlier.
    public static func - (instant: MonotonicInstant, seconds: Double) -> MonotonicInstant {
        MonotonicInstant(seconds: instant.seconds - seconds)
    }

    /// Seconds from `rhs` to `lhs`.
    public static func - (lhs: MonotonicInstant, rhs: MonotonicInstant) -> Double { lhs.seconds - rhs.seconds }

    public var description: String { "boot+\(seconds)s" }
}

/// A point in wall-clock time: seconds since the Unix epoch. What a JWT's `exp` and the wire's
/// expiry say; never used for a deadline, since the wall clock can jump.
public struct UnixTime: Comparable, Hashable, Sendable, CustomStringConvertible {
    /// Seconds since 1970-01-01T00:00:00Z.
    public var seconds: Double

    /// The time `seconds` after the epoch.
    public init(seconds: Double) { self.seconds = seconds }

    /// Whole seconds, rounded down: the wire's `<expires-at>` (clamped to `Int64`'s range).
    @inline(__always)
    public var wholeSeconds: Int64 {
        // Every time since the epoch: truncating is rounding down, with no call to round.
        if seconds >= 0, seconds < 9.2e18 { return Int64(seconds) }
        return Int64(saturating: seconds.rounded(.down))
    }

    public static func < (lhs: UnixTime, rhs: UnixTime) -> Bool { lhs.seconds < rhs.seconds }

    /// The time `seconds` later.
    public static func + (time: UnixTime, seconds: Double) -> UnixTime { UnixTime(seconds: time.seconds + seconds) }

    /// Seconds from `rhs` to `lhs`.
    public static func - (lhs: UnixTime, rhs: UnixTime) -> Double { lhs.seconds - rhs.seconds }

    public var description: String { "unix \(seconds)" }
}

extension AgentClock {
    /// Now, on the monotonic clock.
    public var now: MonotonicInstant { MonotonicInstant(seconds: monotonicSeconds) }
    /// Now, on the wall clock.
    public var unixNow: UnixTime { UnixTime(seconds: wallSeconds) }
}
