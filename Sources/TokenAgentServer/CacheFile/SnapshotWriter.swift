import Logging
import NIOPosix
import Synchronization
import TokenAgent

/// Writes the engine's servable tokens as a ``CacheSnapshot`` to every destination: at start
/// (once the tokens are adopted), every `cache_file_interval`, and at stop. The cache file's never
/// holds an access token (``TokenCacheMedium``); the fd store's holds every kind's.
///
/// A pass streams: the tokens are copied out of the store, encoded and checksummed a chunk at a
/// time (``TokenEngine/exportTokens(to:into:chunkSize:afterChunk:)``: one shard's lock held for at
/// most 32 slots' encoding, straight from the segments), and each ``flushBytes`` of body goes to
/// the destinations at once (``SnapshotSink``), through one reused buffer (that and room for one
/// more chunk, some 0.6 MB): a snapshot of 100,000 tokens (73 MB) never sits whole in memory. The header, which has a fixed size, is written
/// last, at the start. A pass runs on the thread that asks for it, never the socket loop's. Off
/// the loop (``writeOffLoop(reason:)``) that is a thread of its own, at the agent's priority
/// (the copy takes the locks GETs take), in short bursts with rests between them
/// (``SnapshotPacing``), so a socket loop never waits behind it for more than one burst; its
/// commits only when no other thread wants a core. One pass runs at a time. A failed write is a
/// warning and a count, never a stop.
public final class SnapshotWriter: Sendable {
    /// The body a pass keeps before handing it to the destinations.
    public static let flushBytes = 64 * 1024

    private let engine: TokenEngine
    private let destinations: [any SnapshotDestination]
    private let digests: @Sendable () -> [String: String]
    private let statistics: SnapshotStatistics
    private let clock: any AgentClock
    private let logger: Logger
    private let pacing: SnapshotPacing
    private let serial = Mutex(())
    /// Set when the agent stops: passes off the loop give up (``giveUpPassesOffLoop()``).
    private let givingUp = Atomic<Bool>(false)

    /// A writer of `engine`'s tokens to `destinations`, recording each kind's provider digest as
    /// `digests` gives it at the time of the pass (a reload changes them); passes off the loop
    /// are paced by `pacing`.
    public init(
        engine: TokenEngine,
        destinations: [any SnapshotDestination],
        digests: @escaping @Sendable () -> [String: String],
        statistics: SnapshotStatistics,
        clock: any AgentClock = SystemAgentClock(),
        pacing: SnapshotPacing = .standard,
        logger: Logger
    ) {
        self.engine = engine
        self.destinations = destinations
        self.digests = digests
        self.statistics = statistics
        self.clock = clock
        self.pacing = pacing
        self.logger = logger
    }

    /// Whether the writer has anywhere to write.
    public var hasDestinations: Bool { !destinations.isEmpty }

    /// One pass on the calling thread, at its priority and without rests: export, encode, write
    /// each destination, record (the write at stop, when nothing else runs). Returns whether
    /// every destination took the snapshot.
    @discardableResult
    public func write(reason: String) -> Bool {
        serial.withLock { _ in
            givingUp.store(false, ordering: .relaxed)
            var pass = SnapshotPass(writer: self, pacer: nil, shouldGoOn: { true })
            return writeOnce(reason: reason, pass: &pass) ?? false
        }
    }

    /// One pass off the socket loop and off Swift's concurrency pool, on a thread of its own
    /// (``BackgroundThread``): the copy, with its writes, at the agent's priority, paced
    /// (``SnapshotPacing``); then the commits (each file's sync and rename, which frees the old
    /// file's pages in one go) only when no other thread wants a core. On NIO's blocking-I/O pool,
    /// paced the same and committed at its priority, when the system refuses a thread.
    @discardableResult
    public func writeOffLoop(reason: String) async -> Bool {
        let pass: @Sendable (_ ownThread: Bool) -> Bool? = { ownThread in
            self.serial.withLock { _ in
                var pass = SnapshotPass(
                    writer: self,
                    pacer: SnapshotPacer(self.pacing),
                    shouldGoOn: { !self.givingUp.load(ordering: .relaxed) },
                    beforeCommits: { if ownThread { BackgroundThread.yieldToOthers() } }
                )
                return self.writeOnce(reason: reason, pass: &pass)
            }
        }
        if let written = await BackgroundThread.run({ pass(true) }) { return written ?? false }
        let onPool = try? await NIOThreadPool.singleton.runIfActive { pass(false) }
        return (onPool ?? nil) ?? false
    }

    /// Gives up the pass off the loop in progress, if any, and any that starts after, at its next
    /// step (a chunk of the copy, or a destination's commit): the agent is stopping, and its write
    /// at stop (``write(reason:)``) follows with fresher tokens. A pass given up records nothing,
    /// and a destination it had not committed to yet keeps what it held.
    public func giveUpPassesOffLoop() {
        givingUp.store(true, ordering: .relaxed)
    }

    /// A pass through `pass`: `nil` when it was given up.
    private func writeOnce(reason: String, pass: inout SnapshotPass) -> Bool? {
        guard !destinations.isEmpty else { return true }
        let started = clock.monotonicSeconds
        let outcome = pass.run()
        for (destination, error) in pass.failures {
            statistics.recordFailure(destination: destination)
            logger.warning(
                "cannot write the cache snapshot",
                metadata: ["destination": "\(destination)", "reason": "\(reason)", "error": "\(error)"]
            )
        }
        switch outcome {
        case .givenUp:
            logger.debug(
                "cache snapshot given up: the agent is stopping, its write at stop follows",
                metadata: ["reason": "\(reason)"]
            )
            return nil
        case .providersChanging:
            logger.warning("cache snapshot skipped: reloads changed the providers while it was taken")
            for destination in destinations { statistics.recordFailure(destination: destination.name) }
            return false
        case .written(let largest):
            return record(largest, reason: reason, started: started, wroteAll: pass.failures.isEmpty)
        }
    }

    /// Logs and records a pass whose largest snapshot was `snapshot`.
    private func record(_ snapshot: CacheSnapshot.Encoded?, reason: String, started: Double, wroteAll: Bool) -> Bool {
        guard let snapshot else { return wroteAll }
        if snapshot.leftOut > 0 {
            logger.warning(
                "tokens left out of the cache snapshot",
                metadata: ["tokens": "\(snapshot.leftOut)", "limit_bytes": "\(CacheSnapshot.maxBytes)"]
            )
        }
        let duration = clock.monotonicSeconds - started
        guard wroteAll else { return false }
        statistics.recordWrite(
            SnapshotStatistics.Write(
                endedAt: clock.wallSeconds,
                bytes: snapshot.byteCount,
                tokens: snapshot.tokenCount,
                duration: duration
            )
        )
        let metadata: Logger.Metadata = [
            "reason": "\(reason)", "tokens": "\(snapshot.tokenCount)", "bytes": "\(snapshot.byteCount)",
            "duration_ms": "\(Int((duration * 1000).rounded()))",
            "destinations": "\(destinations.map(\.name).joined(separator: ","))",
        ]
        if reason == "interval" {
            logger.debug("cache snapshot written", metadata: metadata)
        } else {
            logger.info("cache snapshot written", metadata: metadata)
        }
        return true
    }

    /// What a pass needs of its writer.
    var passContext: (engine: TokenEngine, destinations: [any SnapshotDestination], digests: () -> [String: String]) {
        (engine, destinations, digests)
    }
}
