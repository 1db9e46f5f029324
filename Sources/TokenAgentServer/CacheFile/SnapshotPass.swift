import TokenAgent

/// One pass of a ``SnapshotWriter``: the cache exported once for each medium its destinations
/// need, each export streamed into the sinks of the destinations it serves, then each sink
/// committed.
///
/// The digests of the kinds' providers are read before and after the export, and the pass is
/// taken again (its sinks abandoned) when a reload changed them in between, so that no token is
/// recorded under the digest of a provider that did not make it. The
/// ``TokenCacheMedium/disk`` snapshot never holds the tokens, nor the provider digests, of a kind
/// that keeps its tokens in memory (access tokens); the store leaves them out as it copies each
/// chunk. When the destinations are on both media and such a kind is configured, the cache is
/// exported once for each; otherwise one export serves every destination.
struct SnapshotPass {
    /// How a pass ended.
    enum Outcome {
        /// Committed to every destination that did not fail (``failures``); the largest snapshot
        /// (the fd store's, when it holds access tokens the cache file does not), `nil` when no
        /// destination could begin.
        case written(CacheSnapshot.Encoded?)
        /// Reloads kept changing the providers' digests: nothing was committed.
        case providersChanging
        /// `shouldGoOn` said no (the agent is stopping): nothing more was committed.
        case givenUp
    }

    private let engine: TokenEngine
    private let destinations: [any SnapshotDestination]
    private let digests: () -> [String: String]
    private var pacer: SnapshotPacer?
    private let shouldGoOn: () -> Bool
    private let beforeCommits: () -> Void
    /// The destinations that failed in the last try, by name, and why (a try taken again
    /// because a reload changed the digests counts nothing).
    private(set) var failures: [(String, any Error)] = []

    /// A pass of `writer`'s, paced by `pacer` when there is one, asking `shouldGoOn` after each
    /// chunk of the copy and before each commit; `beforeCommits` runs once the copy is whole,
    /// before the first commit (where a periodic pass gives way to every other thread).
    init(
        writer: SnapshotWriter,
        pacer: SnapshotPacer?,
        shouldGoOn: @escaping () -> Bool,
        beforeCommits: @escaping () -> Void = {}
    ) {
        (engine, destinations, digests) = writer.passContext
        self.pacer = pacer
        self.shouldGoOn = shouldGoOn
        self.beforeCommits = beforeCommits
    }

    /// A snapshot streaming into the sinks of the destinations it serves.
    private struct Stream {
        var exported: TokenCacheMedium
        var sinks: [(destination: any SnapshotDestination, sink: any SnapshotSink)]
        var framing: CacheSnapshot.Encoded?
    }

    /// Runs the pass: up to three tries while reloads change the digests.
    mutating func run() -> Outcome {
        for _ in 0..<3 {
            failures = []
            let before = digests()
            var streams = begin()
            for index in streams.indices {
                guard export(&streams[index], digests: before) else {
                    abandon(streams)
                    return .givenUp
                }
            }
            guard digests() == before else {
                abandon(streams)
                continue
            }
            return commit(streams)
        }
        failures = []
        return .providersChanging
    }

    /// A stream for each export the destinations need, with the sinks begun (a destination that
    /// cannot begin is a failure).
    private mutating func begin() -> [Stream] {
        let media = Set(destinations.map(\.medium))
        let split = media.count > 1 && engine.kinds.contains { engine.tokensStayInMemory(kind: $0) }
        var streams: [Stream] = []
        for destination in destinations {
            // Split, each medium its own export; else one export of the strictest medium's
            // tokens. A reload that adds a kind keeping its tokens in memory meanwhile changes
            // the digests: the pass is taken again, split.
            let exported = split ? destination.medium : (media.contains(.disk) ? .disk : destination.medium)
            let sink: any SnapshotSink
            do {
                sink = try destination.begin()
            } catch {
                failures.append((destination.name, error))
                continue
            }
            if let index = streams.firstIndex(where: { $0.exported == exported }) {
                streams[index].sinks.append((destination, sink))
            } else {
                streams.append(Stream(exported: exported, sinks: [(destination, sink)]))
            }
        }
        return streams
    }

    /// Exports the tokens `stream` takes into its sinks, a ``SnapshotWriter/flushBytes`` at a
    /// time; `false` when the pass was given up.
    private mutating func export(_ stream: inout Stream, digests: [String: String]) -> Bool {
        let providers =
            stream.exported == .disk ? digests.filter { !engine.tokensStayInMemory(kind: $0.key) } : digests
        var builder = CacheSnapshot.Builder(providers: providers)
        var sinks = stream.sinks
        var failed: [(String, any Error)] = []
        var pacer = self.pacer
        let shouldGoOn = self.shouldGoOn
        let whole = engine.exportTokens(to: stream.exported, into: &builder) { builder in
            if builder.pendingBytes >= SnapshotWriter.flushBytes {
                builder.drain { bytes in Self.append(bytes, to: &sinks, failed: &failed) }
            }
            pacer?.step()
            return shouldGoOn()
        }
        self.pacer = pacer
        failures += failed
        stream.sinks = sinks
        guard whole else { return false }
        stream.framing = builder.finish()
        return true
    }

    /// Appends `bytes` to each sink; one that fails is dropped, its destination a failure.
    private static func append(
        _ bytes: UnsafeRawBufferPointer,
        to sinks: inout [(destination: any SnapshotDestination, sink: any SnapshotSink)],
        failed: inout [(String, any Error)]
    ) {
        sinks.removeAll { entry in
            do {
                try entry.sink.append(bytes)
                return false
            } catch {
                entry.sink.abandon()
                failed.append((entry.destination.name, error))
                return true
            }
        }
    }

    /// Commits every sink, asking `shouldGoOn` before each.
    private mutating func commit(_ streams: [Stream]) -> Outcome {
        beforeCommits()
        var largest: CacheSnapshot.Encoded?
        for (index, stream) in streams.enumerated() {
            guard let framing = stream.framing else { continue }
            for (position, entry) in stream.sinks.enumerated() {
                guard shouldGoOn() else {
                    for entry in stream.sinks[position...] { entry.sink.abandon() }
                    abandon(Array(streams[(index + 1)...]))
                    return .givenUp
                }
                do {
                    try entry.sink.commit(framing)
                } catch {
                    entry.sink.abandon()
                    failures.append((entry.destination.name, error))
                }
            }
            if largest.map({ $0.byteCount < framing.byteCount }) ?? true { largest = framing }
        }
        return .written(largest)
    }

    private func abandon(_ streams: [Stream]) {
        for stream in streams {
            for entry in stream.sinks { entry.sink.abandon() }
        }
    }
}
