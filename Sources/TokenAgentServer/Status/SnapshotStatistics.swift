import Synchronization
import TokenAgent

/// What the agent did with cache snapshots: the tokens it adopted at start, and its writes (to the
/// cache file, to systemd's fd store), for `STATS`, the metrics and `status`.
public final class SnapshotStatistics: Sendable {
    /// One write: when it ended, what it held, how long it took.
    public struct Write: Sendable, Equatable {
        /// When it ended, Unix seconds.
        public var endedAt: Double
        /// The snapshot's bytes.
        public var bytes: Int
        /// The tokens it held.
        public var tokens: Int
        /// Export, encoding and every destination's write, seconds.
        public var duration: Double

        /// Creates a write's record.
        public init(endedAt: Double, bytes: Int, tokens: Int, duration: Double) {
            self.endedAt = endedAt
            self.bytes = bytes
            self.tokens = tokens
            self.duration = duration
        }
    }

    /// What the statistics hold now.
    public struct Counts: Sendable, Equatable {
        /// Passes that wrote every destination.
        public var writes = 0
        /// Destination writes that failed, by destination (`file`, `fd_store`).
        public var failures: [String: Int] = [:]
        /// The last pass that wrote every destination.
        public var lastWrite: Write?
        /// What the start-up adoption took and skipped.
        public var adoption = SnapshotAdoption.Counts()
        /// Where the adopted tokens came from (`file`, `fd_store`), or `nil` when nothing was read.
        public var adoptedFrom: String?

        /// Every failed destination write.
        public var failureCount: Int { failures.values.reduce(0, +) }
    }

    private let state = Mutex(Counts())
    /// The destinations writes go to, whose failure counts start at 0.
    public let destinations: [String]
    /// The cache file's path (`cache_file`), `nil` without one.
    public let file: String?

    /// Creates empty statistics for writes to `destinations`, one of them the cache file at `file`.
    public init(destinations: [String] = [], file: String? = nil) {
        self.destinations = destinations
        self.file = file
        state.withLock { counts in for name in destinations { counts.failures[name] = 0 } }
    }

    /// The counts now.
    public var counts: Counts { state.withLock { $0 } }

    /// Records a pass that wrote every destination.
    public func recordWrite(_ write: Write) {
        state.withLock {
            $0.writes += 1
            $0.lastWrite = write
        }
    }

    /// Records a failed write to `destination`.
    public func recordFailure(destination: String) {
        state.withLock { $0.failures[destination, default: 0] += 1 }
    }

    /// Records the start-up adoption from `source`.
    public func recordAdoption(_ counts: SnapshotAdoption.Counts, from source: String) {
        state.withLock {
            $0.adoption = counts
            $0.adoptedFrom = source
        }
    }
}
