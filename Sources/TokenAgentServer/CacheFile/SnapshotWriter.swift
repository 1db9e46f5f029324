import Logging
import NIOPosix
import Synchronization
import TokenAgent

/// Where cache snapshots go: the cache file, or systemd's file-descriptor store.
public protocol SnapshotDestination: Sendable {
    /// Its name in logs and metrics (`file`, `fd_store`).
    var name: String { get }
    /// Puts `snapshot` in the place of the one it held. Throws when it could not; what it held
    /// before then stays.
    func write(_ snapshot: CacheSnapshot.Encoded) throws
}

/// Writes the engine's servable tokens as one ``CacheSnapshot`` to every destination: at start
/// (once the tokens are adopted), every `cache_file_interval`, and at stop.
///
/// A pass never stalls the socket loop, which shares the engine: the tokens are copied out of the
/// store a chunk at a time (``TokenEngine/exportTokens(chunkSize:_:)``: one shard's lock held for
/// at most 32 slots' copy), and the encoding, hashing and I/O run on the thread that runs the pass
/// (``writeOffLoop(reason:)``: NIO's blocking-I/O pool), never the loop's. One pass runs at a time.
/// A failed write is a warning and a count, never a stop.
public final class SnapshotWriter: Sendable {
    private let engine: TokenEngine
    private let destinations: [any SnapshotDestination]
    private let digests: @Sendable () -> [String: String]
    private let statistics: SnapshotStatistics
    private let clock: any AgentClock
    private let logger: Logger
    private let serial = Mutex(())

    /// A writer of `engine`'s tokens to `destinations`, recording each kind's provider digest as
    /// `digests` gives it at the time of the pass (a reload changes them).
    public init(
        engine: TokenEngine,
        destinations: [any SnapshotDestination],
        digests: @escaping @Sendable () -> [String: String],
        statistics: SnapshotStatistics,
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger
    ) {
        self.engine = engine
        self.destinations = destinations
        self.digests = digests
        self.statistics = statistics
        self.clock = clock
        self.logger = logger
    }

    /// Whether the writer has anywhere to write.
    public var hasDestinations: Bool { !destinations.isEmpty }

    /// The snapshot of the tokens now, with the digests of their kinds' providers: read before
    /// and after the tokens, and taken again when a reload changed them in between, so that no
    /// token is recorded under the digest of a provider that did not make it. `nil` when reloads
    /// kept changing them (the pass is skipped).
    public func snapshot() -> CacheSnapshot.Encoded? {
        // Room for what the last snapshot took and an eighth more, else about 1 KiB a cached entry.
        let last = statistics.counts.lastWrite?.bytes ?? engine.statistics().entries * 1024
        for _ in 0..<3 {
            let before = digests()
            var builder = CacheSnapshot.Builder(providers: before, expectedBytes: last + last / 8)
            engine.exportTokens { builder.append(contentsOf: $0) }
            if digests() == before { return builder.finish() }
        }
        return nil
    }

    /// One pass on the calling thread: export, encode, write each destination, record. Returns
    /// whether every destination took the snapshot.
    @discardableResult
    public func write(reason: String) -> Bool {
        serial.withLock { _ in writeOnce(reason: reason) }
    }

    /// One pass on NIO's blocking-I/O pool, off the socket loop and off Swift's concurrency pool.
    @discardableResult
    public func writeOffLoop(reason: String) async -> Bool {
        (try? await NIOThreadPool.singleton.runIfActive { self.write(reason: reason) }) ?? false
    }

    private func writeOnce(reason: String) -> Bool {
        guard !destinations.isEmpty else { return true }
        let started = clock.monotonicSeconds
        guard let snapshot = snapshot() else {
            logger.warning("cache snapshot skipped: reloads changed the providers while it was taken")
            for destination in destinations { statistics.recordFailure(destination: destination.name) }
            return false
        }
        if snapshot.leftOut > 0 {
            logger.warning(
                "tokens left out of the cache snapshot",
                metadata: ["tokens": "\(snapshot.leftOut)", "limit_bytes": "\(CacheSnapshot.maxBytes)"]
            )
        }
        var wroteAll = true
        for destination in destinations {
            do {
                try destination.write(snapshot)
            } catch {
                wroteAll = false
                statistics.recordFailure(destination: destination.name)
                logger.warning(
                    "cannot write the cache snapshot",
                    metadata: ["destination": "\(destination.name)", "reason": "\(reason)", "error": "\(error)"]
                )
            }
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
}
