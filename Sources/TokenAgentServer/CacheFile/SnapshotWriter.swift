import Logging
import NIOPosix
import Synchronization
import TokenAgent

/// Where cache snapshots go: the cache file, or systemd's file-descriptor store.
public protocol SnapshotDestination: Sendable {
    /// Its name in logs and metrics (`file`, `fd_store`).
    var name: String { get }
    /// What it is, and so which tokens it may hold: ``TokenCacheMedium/disk`` (the cache file)
    /// never holds the tokens of a kind that keeps them in memory (access tokens),
    /// ``TokenCacheMedium/memory`` (systemd's fd store) holds every kind's.
    var medium: TokenCacheMedium { get }
    /// Puts `snapshot` in the place of the one it held. Throws when it could not; what it held
    /// before then stays.
    func write(_ snapshot: CacheSnapshot.Encoded) throws
}

/// Writes the engine's servable tokens as a ``CacheSnapshot`` to every destination: at start
/// (once the tokens are adopted), every `cache_file_interval`, and at stop. The cache file's never
/// holds an access token (``TokenCacheMedium``); the fd store's holds every kind's.
///
/// A pass never stalls the socket loop, which shares the engine: the tokens are copied out of the
/// store, encoded and checksummed a chunk at a time (``TokenEngine/exportTokens(to:into:chunkSize:)``:
/// one shard's lock held for at most 32 slots' encoding, straight from the segments; each chunk
/// checksummed while it is in the processor's cache), then written, on the thread that runs the pass, never the loop's. Off the
/// loop (``writeOffLoop(reason:)``) that is a thread of its own: the copy at the agent's priority,
/// since it takes the locks GETs take, and the writes only when no other thread wants a core
/// (``BackgroundThread``). One pass runs at a time. A failed write is a warning and a count,
/// never a stop.
public final class SnapshotWriter: Sendable {
    private let engine: TokenEngine
    private let destinations: [any SnapshotDestination]
    private let digests: @Sendable () -> [String: String]
    private let statistics: SnapshotStatistics
    private let clock: any AgentClock
    private let logger: Logger
    private let serial = Mutex(())
    /// Set when the agent stops: passes off the loop give up (``giveUpPassesOffLoop()``).
    private let givingUp = Atomic<Bool>(false)

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

    /// The snapshots of the tokens now, one for each medium of the destinations
    /// (``SnapshotDestination/medium``), with the digests of their kinds' providers: read before
    /// and after the tokens, and taken again when a reload changed them in between, so that no
    /// token is recorded under the digest of a provider that did not make it. `nil` when reloads
    /// kept changing them (the pass is skipped).
    ///
    /// The ``TokenCacheMedium/disk`` snapshot never holds the tokens, nor the provider digests, of
    /// a kind that keeps its tokens in memory (access tokens); the store leaves them out as it
    /// copies each chunk. When the destinations are on both media and such a kind is configured,
    /// the cache is exported once for each; otherwise one snapshot serves every destination.
    public func snapshots() -> [TokenCacheMedium: CacheSnapshot.Encoded]? {
        encodedBodies().flatMap { Self.framed($0) }
    }

    /// The bodies of ``snapshots()``, each built by one export of the cache and serving the media
    /// it names, not yet framed.
    private func encodedBodies() -> [(media: [TokenCacheMedium], body: CacheSnapshot.Builder)]? {
        let media = Set(destinations.map(\.medium))
        // Room for what the last snapshot took and an eighth more, else about 1 KiB a cached entry.
        let last = statistics.counts.lastWrite?.bytes ?? engine.statistics().entries * 1024
        for _ in 0..<3 {
            let before = digests()
            let split = media.count > 1 && engine.kinds.contains { engine.tokensStayInMemory(kind: $0) }
            var taken: [(media: [TokenCacheMedium], body: CacheSnapshot.Builder)] = []
            if split {
                taken.append(([.memory], export(to: .memory, digests: before, expectedBytes: last)))
                taken.append(([.disk], export(to: .disk, digests: before, expectedBytes: last)))
            } else if let strictest = media.contains(.disk) ? TokenCacheMedium.disk : media.first {
                // A reload that adds a kind keeping its tokens in memory meanwhile changes the
                // digests: this pass is taken again, split.
                taken.append((Array(media), export(to: strictest, digests: before, expectedBytes: last)))
            }
            if digests() == before { return taken }
        }
        return nil
    }

    /// Each body framed once (its checksum), for each medium it serves; `nil` when `shouldGoOn`
    /// said no meanwhile.
    private static func framed(
        _ bodies: [(media: [TokenCacheMedium], body: CacheSnapshot.Builder)],
        while shouldGoOn: () -> Bool = { true }
    ) -> [TokenCacheMedium: CacheSnapshot.Encoded]? {
        var snapshots: [TokenCacheMedium: CacheSnapshot.Encoded] = [:]
        for (media, body) in bodies {
            guard let snapshot = body.finish(while: shouldGoOn) else { return nil }
            for medium in media { snapshots[medium] = snapshot }
        }
        return snapshots
    }

    private func givenUp(reason: String) -> Bool? {
        logger.debug(
            "cache snapshot given up: the agent is stopping, its write at stop follows",
            metadata: ["reason": "\(reason)"]
        )
        return nil
    }

    /// The body of one snapshot of the tokens that may go to `medium`, with the digests of those
    /// tokens' kinds.
    private func export(to medium: TokenCacheMedium, digests: [String: String], expectedBytes: Int)
        -> CacheSnapshot.Builder
    {
        let providers = medium == .disk ? digests.filter { !engine.tokensStayInMemory(kind: $0.key) } : digests
        var builder = CacheSnapshot.Builder(providers: providers, expectedBytes: expectedBytes + expectedBytes / 8)
        engine.exportTokens(to: medium, into: &builder)
        return builder
    }

    /// One pass on the calling thread, at its priority: export, encode, write each destination,
    /// record (the write at stop, when nothing else runs). Returns whether every destination took
    /// the snapshot.
    @discardableResult
    public func write(reason: String) -> Bool {
        serial.withLock { _ in
            givingUp.store(false, ordering: .relaxed)
            return writeOnce(reason: reason, afterCopy: {}, shouldGoOn: { true }) ?? false
        }
    }

    /// One pass off the socket loop and off Swift's concurrency pool, on a thread of its own
    /// (``BackgroundThread``): the copy out of the store at the agent's priority, then the writes
    /// only when no other thread wants a core, so that socket GETs keep their cores; on NIO's blocking-I/O pool, at its priority, when the system refuses a thread.
    @discardableResult
    public func writeOffLoop(reason: String) async -> Bool {
        let yield: @Sendable () -> Void = { BackgroundThread.yieldToOthers() }
        let shouldGoOn: @Sendable () -> Bool = { !self.givingUp.load(ordering: .relaxed) }
        let written = await BackgroundThread.run {
            self.serial.withLock { _ in self.writeOnce(reason: reason, afterCopy: yield, shouldGoOn: shouldGoOn) }
        }
        if let written { return written ?? false }
        let onPool = try? await NIOThreadPool.singleton.runIfActive {
            self.serial.withLock { _ in self.writeOnce(reason: reason, afterCopy: {}, shouldGoOn: shouldGoOn) }
        }
        return (onPool ?? nil) ?? false
    }

    /// Gives up the pass off the loop in progress, if any, and any that starts after, at its next
    /// step (a mebibyte of checksum left, or a destination): the agent is stopping, and its write
    /// at stop (``write(reason:)``) follows with fresher tokens. A pass given up records nothing.
    public func giveUpPassesOffLoop() {
        givingUp.store(true, ordering: .relaxed)
    }

    /// A pass: `afterCopy` runs once the tokens are out of the store, before the framing;
    /// `shouldGoOn` is asked before each step after it. `nil` when it said no.
    private func writeOnce(reason: String, afterCopy: () -> Void, shouldGoOn: () -> Bool) -> Bool? {
        guard !destinations.isEmpty else { return true }
        let started = clock.monotonicSeconds
        let bodies = encodedBodies()
        afterCopy()
        let framed = bodies.map { Self.framed($0, while: shouldGoOn) }
        if case .some(.none) = framed { return givenUp(reason: reason) }
        guard let snapshots = framed ?? nil else {
            logger.warning("cache snapshot skipped: reloads changed the providers while it was taken")
            for destination in destinations { statistics.recordFailure(destination: destination.name) }
            return false
        }
        // The statistics record the largest: the fd store's, when it holds access tokens the
        // cache file does not.
        guard let snapshot = snapshots.values.max(by: { $0.byteCount < $1.byteCount }) else { return true }
        if snapshot.leftOut > 0 {
            logger.warning(
                "tokens left out of the cache snapshot",
                metadata: ["tokens": "\(snapshot.leftOut)", "limit_bytes": "\(CacheSnapshot.maxBytes)"]
            )
        }
        var wroteAll = true
        for destination in destinations {
            guard shouldGoOn() else { return givenUp(reason: reason) }
            do {
                try destination.write(snapshots[destination.medium] ?? snapshot)
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
