#if canImport(Glibc)
    import Glibc
#endif

/// How a periodic cache snapshot spreads its copy of the tokens out of the store in time: bursts
/// of ``burstMicroseconds`` of work (checked after each chunk of the copy, so a burst ends with
/// the chunk that passes it), each followed by a rest of ``restMicroseconds``.
///
/// The copy runs at the agent's priority, since it takes the locks socket GETs take; a copy of
/// 100,000 tokens in one go (a tenth of a second or more of one core) is a thread that a socket
/// loop waits behind for a whole time slice whenever the cores are busy. In bursts, the loop
/// waits for one burst at most. The write at stop is not paced: nothing else runs then.
public struct SnapshotPacing: Sendable {
    /// The stretch of work after which a pass rests (checked after each chunk of the copy).
    public var burstMicroseconds: Int
    /// How long each rest lasts.
    public var restMicroseconds: Int
    /// Rests the calling thread for the microseconds given (tests record them instead).
    let rest: @Sendable (Int) -> Void

    /// 50 µs of work (to the end of the chunk that passes them), then 200 µs of rest: the copy
    /// takes about a fifth of one core, and a pass of 100,000 tokens (73 MB) under a second
    /// (`Benchmarks/cache-file.sh`).
    public static let standard = SnapshotPacing(burstMicroseconds: 50, restMicroseconds: 200)

    /// Bursts of `burstMicroseconds` (0: a rest after every chunk), rests of `restMicroseconds`,
    /// taken by `rest` (by default, the thread sleeps).
    public init(
        burstMicroseconds: Int,
        restMicroseconds: Int,
        rest: @escaping @Sendable (Int) -> Void = SnapshotPacing.sleep
    ) {
        self.burstMicroseconds = max(0, burstMicroseconds)
        self.restMicroseconds = max(0, restMicroseconds)
        self.rest = rest
    }

    /// Sleeps the calling thread for `microseconds`.
    @Sendable public static func sleep(microseconds: Int) {
        var asked = timespec(tv_sec: microseconds / 1_000_000, tv_nsec: (microseconds % 1_000_000) * 1000)
        var left = timespec()
        while nanosleep(&asked, &left) != 0, errno == EINTR { asked = left }
    }
}

/// One pass's pacing (``SnapshotPacing``): where its current burst began.
struct SnapshotPacer {
    private let pacing: SnapshotPacing
    private var burstStarted: Int64

    init(_ pacing: SnapshotPacing) {
        self.pacing = pacing
        burstStarted = Self.nanoseconds()
    }

    /// Called between two steps of work: rests once the burst has run its length.
    mutating func step() {
        let now = Self.nanoseconds()
        guard now - burstStarted >= Int64(pacing.burstMicroseconds) * 1000 else { return }
        pacing.rest(pacing.restMicroseconds)
        burstStarted = Self.nanoseconds()
    }

    private static func nanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
