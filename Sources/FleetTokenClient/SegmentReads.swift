import CSharedMemory
import Dispatch
import Synchronization
import TokenSegment
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The client's shared-memory read path: per kind, the agent's segment mapped read-only, read
/// with no system call; and the keys read that way, reported to the agent (`TOUCH`) off the read
/// path so it keeps refreshing them (docs/SHM.md).
final class SegmentReads: Sendable {
    private enum Mapping {
        /// Being asked for; callers use the socket meanwhile.
        case asking
        case mapped(SegmentReader)
        /// Not offered (off, denied, busy, or unreadable): asked again after the instant.
        case unavailable(until: UInt64)
    }

    private struct State {
        var mappings: [String: Mapping] = [:]
        var reporting = false
    }

    private let state = Mutex(State())
    /// The cache of reads: 16 shards of ``ReadCacheShard/capacity`` places, so concurrent callers
    /// of different keys seldom take the same lock.
    private let shards: [ReadCacheShard] = (0..<16).map { _ in ReadCacheShard() }
    /// The same shards, unretained, for the read path: taking a shard out of the array would
    /// retain and release it on every read (one atomic count each, shared by every thread).
    private nonisolated(unsafe) let shardReferences: UnsafeMutablePointer<Unmanaged<ReadCacheShard>>

    /// Counts reports, so a key is recorded once per interval.
    private let interval = Atomic(0)
    /// Counts mappings dropped: a read that saw it change while it copied does not cache the copy.
    private let drops = Atomic(0)

    init() {
        shardReferences = .allocate(capacity: shards.count)
        shardReferences.initialize(from: shards.map { Unmanaged.passUnretained($0) }, count: shards.count)
    }

    deinit { shardReferences.deallocate() }

    /// Where `subject` is cached: its shard, and its place in that shard.
    @inline(__always)
    private func place(_ subject: TokenSubject) -> (shard: Unmanaged<ReadCacheShard>, index: Int) {
        let hash = CacheHash.of(subject)
        return (
            shardReferences[Int(truncatingIfNeeded: hash) & 15],
            Int(truncatingIfNeeded: hash >> 4) & (ReadCacheShard.capacity - 1)
        )
    }

    /// How long a kind that was not offered waits before it is asked for again.
    static let retryAfterRefusal: UInt64 = 30_000_000_000

    /// Tokens answered from shared memory.
    var hits: Int { shards.reduce(0) { $0 + $1.answers } }

    /// What a lookup in shared memory decided.
    enum Answer {
        case token(Token)
        /// Ask the agent over the socket (the memo may answer: the kind has no segment).
        case socket
        /// The segment has no token for the key with enough validity: ask the agent, not the memo.
        case miss
        /// Ask the agent for the kind's segment first (then look again, or use the socket).
        case askForSegment
    }

    /// The token for `subject` when the copy kept of its slot is current and servable; `nil`
    /// otherwise, with nothing changed (then ``lookup(_:minimumValidity:)`` reads the segment).
    func cachedToken(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Token? {
        let (shard, index) = place(subject)
        let probe = shard._withUnsafeGuaranteedRef { shard in
            shard.probe(
                subject,
                at: index,
                minimumValidity: minimumValidity,
                now: fsm_boottime_ns(),
                reportInterval: interval.load(ordering: .relaxed)
            )
        }
        guard case .hit(let token) = probe else { return nil }
        return token
    }

    /// The token for `subject` from the kind's segment, when it holds one with enough validity:
    /// for what ``cachedToken(_:minimumValidity:)`` could not answer (its caller looked there
    /// first), from the kind's mapping and the key's slot, whose copy is kept for the next read.
    func lookup(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Answer {
        let now = fsm_boottime_ns()
        let (unmanagedShard, index) = place(subject)
        let shard = unmanagedShard.takeUnretainedValue()
        let reportInterval = interval.load(ordering: .relaxed)
        // Loaded before the mapping is taken: a drop after this changes it (see `store`).
        let dropsBefore = drops.load(ordering: .acquiring)
        let mapped = state.withLock { state -> MappedOrAnswer in
            switch state.mappings[subject.kind] {
            case nil:
                state.mappings[subject.kind] = .asking
                return .answer(.askForSegment)
            case .unavailable(let until) where now >= until:
                state.mappings[subject.kind] = .asking
                return .answer(.askForSegment)
            case .asking, .unavailable:
                return .answer(.socket)
            case .mapped(let reader):
                return .mapped(reader)
            }
        }
        let reader: SegmentReader
        switch mapped {
        case .mapped(let current): reader = current
        case .answer(let answer): return answer
        }
        if let reason = reader.unusableReason(now: now) { return unusable(reason, subject, reader) }
        switch reader.copy(id: subject.id) {
        case .found(let copy):
            // The segment came from whatever answers on the socket: a token the agent could not
            // have served is not used (nor kept), and the socket answers instead.
            let wallNow = Int64(Date().timeIntervalSince1970)
            guard WireToken.problem(token: copy.token, expiresAt: copy.unixExpiry, now: wallNow) == nil else {
                return .socket
            }
            let token = Token(jwt: copy.token, expiresAt: Date(timeIntervalSince1970: TimeInterval(copy.unixExpiry)))
            shard.store(
                subject,
                at: index,
                reader: reader,
                copy: copy,
                token: token,
                reportInterval: reportInterval,
                readerIsCurrent: { drops.load(ordering: .acquiring) == dropsBefore }
            )
            guard
                reader.isServable(
                    expiry: copy.expiry,
                    lifetime: copy.lifetime,
                    minimumValidity: minimumValidity,
                    now: now
                )
            else { return .miss }
            shard.countAnswer()
            return .token(token)
        case .absent:
            return .miss
        case .unusable(let reason):
            return unusable(reason, subject, reader)
        }
    }

    /// The kind's mapping, or what to answer without one.
    private enum MappedOrAnswer {
        case mapped(SegmentReader)
        case answer(Answer)
    }

    /// A segment that cannot answer: retired (ask again: the agent has a newer one) or stale (the
    /// agent is gone; asking again finds the next one, or fails and waits) is dropped; a slot that
    /// kept changing is read through the socket this once.
    private func unusable(_ reason: String, _ subject: TokenSubject, _ reader: SegmentReader) -> Answer {
        guard reason == "segment retired" || reason == "agent heartbeat stale" else { return .socket }
        let dropped = state.withLock { state -> Bool in
            guard case .mapped(let current) = state.mappings[subject.kind], current === reader else { return false }
            state.mappings[subject.kind] = nil
            return true
        }
        if dropped {
            drops.add(1, ordering: .releasing)
            for shard in shards { shard.forget(reader) }
        }
        return .socket
    }

    /// Records the agent's answer to `SHM <kind>`: maps the segment (closing `descriptor`), or
    /// notes that the kind is not offered for a while.
    func received(kind: String, reply: WireReply?, descriptor: Int32?) {
        defer { if let descriptor { close(descriptor) } }
        var mapping = Mapping.unavailable(until: fsm_boottime_ns() + Self.retryAfterRefusal)
        if case .ok(let text)? = reply, let descriptor {
            let fields = WireReply.statsFields(text)
            if let layout = fields["layout"].flatMap(UInt32.init), layout == SegmentLayout.version,
                let size = fields["size"].flatMap(Int.init),
                let reader = try? SegmentReader(descriptor: descriptor, expectedSize: size, kind: kind)
            {
                mapping = .mapped(reader)
            }
        }
        state.withLock { $0.mappings[kind] = mapping }
    }

    /// Whether `kind` has a mapped segment (then the memo is not used for it).
    func isMapped(_ kind: String) -> Bool {
        state.withLock { state in
            if case .mapped = state.mappings[kind] { return true }
            return false
        }
    }

    /// How often keys read through memory are reported: a quarter of the agent's idle time-out,
    /// 1 to 60 s.
    var reportInterval: Double {
        state.withLock { state in
            var idle = Double.infinity
            for case .mapped(let reader) in state.mappings.values {
                idle = min(idle, Double(reader.idleTimeoutNanoseconds) / 1e9)
            }
            return min(60, max(1, idle / 4))
        }
    }

    /// The keys read through memory since the last call, as TOUCH requests that fit a line.
    func takeTouches() -> [WireRequest] {
        var touched: [String: Set<String>] = [:]
        for shard in shards { touched.merge(shard.takeTouched()) { $0.union($1) } }
        interval.add(1, ordering: .relaxed)
        return touched.flatMap { kind, ids in
            idLines(verb: "TOUCH", kind: kind, ids: ids).map { WireRequest.touch(kind: kind, ids: $0) }
        }
    }

    /// Starts the reporter when none runs; `false` when one does.
    func claimReporter() -> Bool {
        state.withLock { state in
            if state.reporting { return false }
            state.reporting = true
            return true
        }
    }
}
