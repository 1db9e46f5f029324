#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The agent's two clocks: a monotonic one for every deadline, the wall clock only to read `exp`.
public protocol AgentClock: Sendable {
    /// Seconds on a monotonic clock that keeps counting through suspend (`CLOCK_BOOTTIME`).
    var monotonicSeconds: Double { get }
    /// Seconds since the Unix epoch.
    var wallSeconds: Double { get }
}

/// The real clocks of the machine.
public struct SystemAgentClock: AgentClock {
    /// Creates the system clock.
    public init() {}

    public var monotonicSeconds: Double {
        var spec = timespec()
        #if os(Linux)
            clock_gettime(CLOCK_BOOTTIME, &spec)
        #else
            clock_gettime(CLOCK_MONOTONIC, &spec)
        #endif
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000
    }

    public var wallSeconds: Double {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000
    }

    /// The wall clock as the kernel last stepped it (`CLOCK_REALTIME_COARSE` on Linux): behind
    /// ``wallSeconds`` by at most one scheduler tick (1 to 10 ms), and read from memory without
    /// asking the time source, about a fifth of the cost here (4.6 against 22.4 ns). What the
    /// engine judges a token's `exp` by on every request (``TokenEngine/unixNow``).
    public var coarseWallSeconds: Double {
        var spec = timespec()
        #if os(Linux)
            clock_gettime(CLOCK_REALTIME_COARSE, &spec)
        #else
            clock_gettime(CLOCK_REALTIME, &spec)
        #endif
        return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000
    }
}
