import CSharedMemory
import Dispatch
import Foundation
import Synchronization
import TokenSegment
import TokenWire

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

    /// A token copied out of a slot, valid for as long as the slot's sequence counter keeps the
    /// value it had (any change to the slot changes it): later reads of the id compare one word
    /// instead of hashing, probing and copying again.
    ///
    /// A class, so a lookup takes one reference out of the cache instead of copying its fields.
    private final class CachedRead {
        let reader: SegmentReader
        let copy: SegmentReader.SlotCopy
        let token: Token
        /// The report interval in which the key was last recorded for TOUCH (changed under the
        /// lock only).
        var reportedIn: Int

        init(reader: SegmentReader, copy: SegmentReader.SlotCopy, token: Token, reportedIn: Int) {
            self.reader = reader
            self.copy = copy
            self.token = token
            self.reportedIn = reportedIn
        }
    }

    private struct State {
        var mappings: [String: Mapping] = [:]
        var reporting = false
    }

    /// One part of the cache of reads, by key: concurrent callers of different keys seldom take
    /// the same lock.
    private struct CacheShard {
        var cache: [TokenSubject: CachedRead] = [:]
        /// Keys read through memory since the last report, by kind.
        var touched: [String: Set<String>] = [:]
        /// Reads from memory answered (counted under the lock the read takes anyway).
        var hits = 0
    }

    private final class CacheShardBox: Sendable {
        let state = Mutex(CacheShard())
    }

    /// The most reads kept in a cache shard; past it, the shard starts again.
    static let shardCapacity = 1024

    private let state = Mutex(State())
    private let shards: [CacheShardBox] = (0..<16).map { _ in CacheShardBox() }
    /// Counts reports, so a key is recorded once per interval.
    private let interval = Atomic(0)

    /// The cache shard of `subject`, chosen from the id's last two bytes (cheaper than hashing it
    /// twice; ids that differ only earlier share a shard, which costs contention, not correctness).
    private func shard(_ subject: TokenSubject) -> CacheShardBox {
        var utf8 = subject.id.utf8.reversed().makeIterator()
        let last = Int(utf8.next() ?? 0)
        let before = Int(utf8.next() ?? 0)
        return shards[(last &+ before &* 7) & 15]
    }
    /// How long a kind that was not offered waits before it is asked for again.
    static let retryAfterRefusal: UInt64 = 30_000_000_000

    /// Tokens answered from shared memory.
    var hits: Int { shards.reduce(0) { total, shard in total + shard.state.withLock { $0.hits } } }

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

    private enum Step {
        case answer(Answer)
        case read(SegmentReader)
        /// Cached, and the slot has not changed since: judge its validity.
        case cached(SegmentReader, SegmentReader.SlotCopy, Token)
    }

    /// The token for `subject` from the kind's segment, when it holds one with enough validity.
    func lookup(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Answer {
        let now = fsm_boottime_ns()
        let shard = self.shard(subject)
        let reportInterval = interval.load(ordering: .relaxed)
        // The fast path: a key read before whose slot has not changed since. Entries always
        // belong to the kind's current mapping (a mapping dropped takes its entries along).
        // A hit, or what the cache holds for the key (looked at again below) when it is no hit.
        let fast = shard.state.withLock { shard -> (token: Token?, cached: CachedRead?) in
            let cached = shard.cache[subject]
            guard let cached, cached.reader.sequence(ofSlot: cached.copy.slot) == cached.copy.sequence,
                cached.reader.isUsable(now: now),
                cached.reader.isServable(
                    expiry: cached.copy.expiry,
                    lifetime: cached.copy.lifetime,
                    minimumValidity: minimumValidity,
                    now: now
                )
            else { return (nil, cached) }
            if cached.reportedIn != reportInterval {
                shard.touched[subject.kind, default: []].insert(subject.id)
                cached.reportedIn = reportInterval
            }
            shard.hits += 1
            return (cached.token, nil)
        }
        if let token = fast.token { return .token(token) }
        let cachedCopy = fast.cached
        let step = state.withLock { state -> Step in
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
                // Cached and unchanged, but not servable or the segment unusable: judged below.
                guard let cached = cachedCopy, cached.reader === reader,
                    reader.sequence(ofSlot: cached.copy.slot) == cached.copy.sequence
                else { return .read(reader) }
                return .cached(reader, cached.copy, cached.token)
            }
        }
        switch step {
        case .answer(let answer):
            return answer
        case .cached(let reader, let copy, let token):
            if let reason = reader.unusableReason(now: now) { return unusable(reason, subject, reader) }
            return judge(token, copy, reader, minimumValidity: minimumValidity, now: now, shard: shard)
        case .read(let reader):
            if let reason = reader.unusableReason(now: now) { return unusable(reason, subject, reader) }
            switch reader.copy(id: subject.id) {
            case .found(let copy):
                let token = Token(
                    jwt: copy.token,
                    expiresAt: Date(timeIntervalSince1970: TimeInterval(copy.unixExpiry))
                )
                shard.state.withLock { shard in
                    if shard.cache.count >= Self.shardCapacity { shard.cache.removeAll(keepingCapacity: true) }
                    shard.cache[subject] = CachedRead(
                        reader: reader,
                        copy: copy,
                        token: token,
                        reportedIn: reportInterval
                    )
                    shard.touched[subject.kind, default: []].insert(subject.id)
                }
                return judge(token, copy, reader, minimumValidity: minimumValidity, now: now, shard: shard)
            case .absent:
                return .miss
            case .unusable(let reason):
                return unusable(reason, subject, reader)
            }
        }
    }

    /// The token of `copy` if it has enough validity left by the agent's rule (counted as a
    /// read from memory), else a miss.
    private func judge(
        _ token: Token,
        _ copy: SegmentReader.SlotCopy,
        _ reader: SegmentReader,
        minimumValidity: TimeInterval?,
        now: UInt64,
        shard: CacheShardBox
    ) -> Answer {
        guard
            reader.isServable(expiry: copy.expiry, lifetime: copy.lifetime, minimumValidity: minimumValidity, now: now)
        else { return .miss }
        shard.state.withLock { $0.hits += 1 }
        return .token(token)
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
            for shard in shards {
                shard.state.withLock { $0.cache = $0.cache.filter { $0.value.reader !== reader } }
            }
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
            if fields["layout"] == String(SegmentLayout.version), let size = fields["size"].flatMap(Int.init),
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
        for shard in shards {
            let taken = shard.state.withLock { shard -> [String: Set<String>] in
                defer { shard.touched = [:] }
                return shard.touched
            }
            touched.merge(taken) { $0.union($1) }
        }
        interval.add(1, ordering: .relaxed)
        var requests: [WireRequest] = []
        for (kind, ids) in touched {
            var batch: [String] = []
            var length = "TOUCH \(kind)".utf8.count
            for id in ids {
                if length + 1 + id.utf8.count > WireLimits.maxRequestLineBytes, !batch.isEmpty {
                    requests.append(.touch(kind: kind, ids: batch))
                    batch = []
                    length = "TOUCH \(kind)".utf8.count
                }
                batch.append(id)
                length += 1 + id.utf8.count
            }
            if !batch.isEmpty { requests.append(.touch(kind: kind, ids: batch)) }
        }
        return requests
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
