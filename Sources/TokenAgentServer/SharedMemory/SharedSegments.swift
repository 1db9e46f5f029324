import CSharedMemory
import Logging
import Synchronization
import TokenAgent
import TokenSegment
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// The agent's shared-memory segments: one per configured kind, kept current by the store
/// (``TokenMirror``) before any reply, beaten every second, and replaced by a new generation when
/// one fills up, when the kind's rules change, and at least every 15 minutes (docs/SHM.md).
///
/// A replaced segment is retired: flagged, so readers ask again (and are checked again), and
/// wiped, so no token lingers in it. Every change happens under one lock; none waits.
///
/// The segments are the agent's only copy of the tokens they hold: the store reads them back
/// through ``withToken(kind:id:_:)``. When a kind must go without a segment for a while (a limit
/// stopped its new generation), its tokens are kept here, privately, until a segment can take
/// them again, so no token the store counts on is lost.
///
/// The limits and the generations (opening, growth, replacement, reopening) are in
/// `SharedSegments+Generations.swift`.
public final class SharedSegments: TokenMirror, Sendable {
    /// A read-only descriptor of a kind's current segment, for one peer.
    public struct Offer: Sendable {
        /// The descriptor (the receiver of the offer closes it).
        public var descriptor: Int32
        public var size: Int
        public var generation: UInt64
        public var kind: String
    }

    /// Counts for STATS and metrics.
    public struct Statistics: Sendable, Equatable {
        public var segments = 0
        public var bytes = 0
        public var slotsUsed = 0
        public var generations = 0
        public var descriptors = 0
        /// Tokens left out of shared memory: a limit stopped a segment's growth, or the token is
        /// larger than the largest slot.
        public var notMirrored = 0
        /// Tokens of kinds a limit left without a segment for now, kept privately until one can
        /// take them.
        public var heldOutside = 0
        /// The bytes of every generation that may still be mapped: the current segments and the
        /// retired ones a reader still holds.
        public var mappedBytes = 0
        /// Retired generations a reader still holds (a descriptor or a mapping).
        public var retiredMapped = 0
        /// `SHM` requests from readers that did not name the layout the agent writes: readers
        /// built before it, which use the socket instead.
        public var oldReaderRequests = 0
    }

    struct State {
        var writers: [String: SegmentWriter] = [:]
        var createdAt: [String: UInt64] = [:]
        var recentGenerations: [String: [UInt64]] = [:]
        var nextGeneration: UInt64
        var policy: SegmentPolicy
        var statistics = Statistics()
        /// Kinds whose new segment is not offered yet (a reload is putting new rules in force).
        var withheld: Set<String> = []
        /// The configured kinds.
        var kinds: Set<String> = []
        /// Tokens of kinds that lost their segment to a limit, by kind and the id's UTF-8 bytes (an
        /// id is its bytes), until a segment takes them again: the agent's only copy of them
        /// meanwhile.
        var orphans: [String: [[UInt8]: Orphan]] = [:]
        /// Every generation made that may still be mapped, current or retired.
        var mapped = MappedGenerations()
        /// Kinds whose next generation is being built beside the current one (rotation).
        var building: [String: Build] = [:]
        /// Generations a rotation replaced: retired (flagged), their slots zeroed a batch at a time.
        var wiping: [SegmentWriter] = []
    }

    /// A kind's next generation being built: it takes every change to the kind, and the current
    /// one's tokens are copied into it from `nextSlot` on.
    struct Build {
        var writer: SegmentWriter
        var nextSlot: Int
    }

    /// A token kept outside any segment.
    struct Orphan {
        var token: [UInt8]
        var expiry: UInt64
        var lifetime: UInt64
        var unixExpiry: Int64
    }

    private let state: Mutex<State>
    let limits: Limits
    let logger: Logger

    /// Segments for `kinds` under the agent's serving rule `policy`.
    public init(kinds: some Sequence<String>, policy: RefreshPolicy, limits: Limits = Limits(), logger: Logger) {
        self.limits = limits
        self.logger = logger
        // Generations count from the milliseconds since boot, so a restarted agent's are higher.
        var initial = State(nextGeneration: fsm_boottime_ns() / 1_000_000, policy: Self.segmentPolicy(policy))
        initial.kinds = Set(kinds)
        for kind in initial.kinds { Self.open(kind, in: &initial, limits: limits, logger: logger) }
        state = Mutex(initial)
    }

    private static func segmentPolicy(_ policy: RefreshPolicy) -> SegmentPolicy {
        SegmentPolicy(
            minValidity: policy.minValidity,
            servingFloor: policy.servingFloor,
            idleTimeout: policy.idleTimeout
        )
    }

    // MARK: TokenMirror

    public func tokenStored(
        kind: String,
        id: String,
        token: String,
        expiry: MonotonicInstant,
        lifetime: Double,
        unixExpiry: UnixTime
    ) -> Bool {
        let expiryNanos = UInt64(saturatingNanoseconds: expiry.seconds)
        let lifetimeNanos = UInt64(saturatingNanoseconds: lifetime)
        let unix = unixExpiry.wholeSeconds
        return state.withLock { state -> Bool in
            guard let writer = state.writers[kind] else {
                // A configured kind a limit left without a segment: kept with its other tokens,
                // for the segment a beat makes.
                guard state.kinds.contains(kind) else { return false }
                state.orphans[kind, default: [:]][Array(id.utf8)] = Orphan(
                    token: Array(token.utf8),
                    expiry: expiryNanos,
                    lifetime: lifetimeNanos,
                    unixExpiry: unix
                )
                return true
            }
            if state.orphans[kind] != nil { Self.removeOrphan(kind, Array(id.utf8), &state) }
            let outcome = writer.put(
                id: id,
                token: token,
                expiry: expiryNanos,
                lifetime: lifetimeNanos,
                unixExpiry: unix
            )
            if outcome == .stored {
                // The generation being built takes every change, so it holds what this one does
                // when it replaces it.
                if let build = state.building[kind],
                    build.writer.put(
                        id: id,
                        token: token,
                        expiry: expiryNanos,
                        lifetime: lifetimeNanos,
                        unixExpiry: unix
                    )
                        != .stored
                {
                    abandonBuild(kind, &state)
                }
                return true
            }
            let idLength = id.utf8.count
            let tokenLength = token.utf8.count
            if let grown = grow(kind, &state, idLength: idLength, tokenLength: tokenLength),
                grown.put(id: id, token: token, expiry: expiryNanos, lifetime: lifetimeNanos, unixExpiry: unix)
                    == .stored
            {
                return true
            }
            // Left out: the segment must not keep an older token of the key.
            state.writers[kind]?.remove(id: id)
            state.statistics.notMirrored += 1
            return false
        }
    }

    public func tokenRemoved(kind: String, id: String) {
        state.withLock { state in
            state.writers[kind]?.remove(id: id)
            state.building[kind]?.writer.remove(id: id)
            if state.orphans[kind] != nil { Self.removeOrphan(kind, Array(id.utf8), &state) }
        }
    }

    public func withToken(kind: String, id: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        state.withLock { state -> Bool in
            if let writer = state.writers[kind].map(LockedWriter.init), writer.writer.withToken(id: id, body) {
                return true
            }
            guard let orphan = state.orphans[kind]?[Array(id)] else { return false }
            orphan.token.withUnsafeBytes(body)
            return true
        }
    }

    /// A writer handed a caller's closure under the lock. Passed to a writer held in `State`, the
    /// closure would tie the whole state to the caller's task as far as the region checker can
    /// tell; the writer is used only for that call, under the lock.
    private struct LockedWriter: @unchecked Sendable {
        let writer: SegmentWriter
    }

    private static func removeOrphan(_ kind: String, _ id: [UInt8], _ state: inout State) {
        state.orphans[kind]?.removeValue(forKey: id)
        if state.orphans[kind]?.isEmpty == true { state.orphans[kind] = nil }
    }

    // MARK: Descriptors

    /// What ``offer(kind:unlessAlreadySent:)`` gave.
    public enum OfferOutcome: Sendable {
        case offered(Offer)
        /// The kind has no segment now (none could be made, or a reload withholds it).
        case none
        /// The current generation is one the asker already has.
        case alreadySent(generation: UInt64)
    }

    /// A read-only descriptor of `kind`'s current segment, unless `alreadySent` says the asker has
    /// that generation: both decided under one lock, so the generation checked is the one offered.
    public func offer(kind: String, unlessAlreadySent alreadySent: (UInt64) -> Bool) -> OfferOutcome {
        state.withLock { state -> OfferOutcome in
            guard let writer = state.writers[kind], !state.withheld.contains(kind) else { return .none }
            if alreadySent(writer.generation) { return .alreadySent(generation: writer.generation) }
            let descriptor = fsm_reopen_read_only(writer.descriptor)
            guard descriptor >= 0 else { return .none }
            state.statistics.descriptors += 1
            return .offered(Offer(descriptor: descriptor, size: writer.size, generation: writer.generation, kind: kind))
        }
    }

    /// Counts an `SHM` request from a reader that did not name the layout the agent writes.
    public func countOldReaderRequest() {
        state.withLock { $0.statistics.oldReaderRequests += 1 }
    }

    // MARK: Upkeep

    /// The heartbeat (every second): stamps every segment, and replaces those older than the
    /// rotation interval. A replacement is built beside the current segment, which readers go on
    /// using: its tokens are copied a batch at a time, the lock released between batches, so no
    /// request waits for more than one batch; then the new generation takes over.
    public func beat() {
        startBeat()
        while advanceBuilding(batch: Self.buildBatch) {}
    }

    /// The heartbeat's stamps and the rotations it starts, without copying: the caller then calls
    /// ``advanceBuilding(batch:)`` until it returns `false`, pausing between calls so requests
    /// waiting for the lock go first (``SegmentHeartbeat``).
    public func startBeat() {
        let now = fsm_boottime_ns()
        state.withLock { state in
            state.mapped.collect()
            for writer in state.writers.values { writer.beat(now: now) }
            let rotation = UInt64(saturatingNanoseconds: limits.rotationInterval)
            for (kind, created) in state.createdAt where now &- created >= rotation && state.building[kind] == nil {
                if !startBuild(kind, &state) { replace(kind, &state, reason: "rotation") }
            }
            // A kind a limit left without a segment gets one again as soon as the limit allows.
            for kind in state.kinds where state.writers[kind] == nil {
                reopen(kind, &state)
            }
        }
    }

    /// Starts building `kind`'s next generation beside its current one, as a due rotation does;
    /// `false` when none could start.
    func startBuilding(_ kind: String) -> Bool { state.withLock { startBuild(kind, &$0) } }

    /// Copies one batch into every generation being built (switching to those done), and zeroes
    /// one batch of every generation they replaced; whether any work is left.
    public func advanceBuilding(batch: Int) -> Bool { state.withLock { advanceBuilds(&$0, batch: batch) } }

    /// Slots copied into a generation being built per hold of the lock: about 0.1 ms of copying.
    public static let buildBatch = 256

    /// A reload: segments for exactly `kinds`, the serving rule `policy`, and a new generation
    /// for each kind in `rulesChanged` (its readers must be checked again). The new generations
    /// are withheld (not offered) until ``offer(_:)`` once the new rules are in force: no reader
    /// of an old segment sees a token written after this, and none gets a new one under old rules.
    public func reconfigure(kinds: Set<String>, policy: RefreshPolicy, rulesChanged: Set<String>) {
        state.withLock { state in
            state.withheld.formUnion(rulesChanged)
            state.policy = Self.segmentPolicy(policy)
            state.kinds = kinds
            // A generation being built would miss this reload's changes to its kind's segment;
            // one a rotation replaced is wiped before the new rules are in force.
            for kind in Array(state.building.keys) { abandonBuild(kind, &state) }
            for writer in state.wiping { writer.retire() }
            state.wiping = []
            for kind in Array(state.writers.keys) where !kinds.contains(kind) {
                if let writer = state.writers.removeValue(forKey: kind) { Self.retire(writer, &state) }
                state.createdAt[kind] = nil
            }
            for kind in Array(state.orphans.keys) where !kinds.contains(kind) { state.orphans[kind] = nil }
            for writer in state.writers.values { writer.update(state.policy) }
            for kind in rulesChanged where state.writers[kind] != nil { replace(kind, &state, reason: "rules changed") }
            // New kinds, and kinds a limit left without a segment, under the limits like any other.
            for kind in kinds where state.writers[kind] == nil { reopen(kind, &state) }
        }
    }

    /// Offers the segments of `kinds` again (after a reload put their new rules in force).
    public func offer(_ kinds: Set<String>) {
        state.withLock { $0.withheld.subtract(kinds) }
    }

    /// Retires every segment (a clean stop): readers stop using them, and their tokens are wiped.
    public func retireAll() {
        state.withLock { state in
            for kind in Array(state.building.keys) { abandonBuild(kind, &state) }
            for writer in state.wiping { writer.retire() }
            state.wiping = []
            for writer in state.writers.values { Self.retire(writer, &state) }
            state.writers = [:]
            state.createdAt = [:]
            state.orphans = [:]
            state.kinds = []
        }
    }

    /// The segments' counts.
    public func statistics() -> Statistics {
        state.withLock { state in
            var statistics = state.statistics
            statistics.segments = state.writers.count
            statistics.bytes = state.writers.values.reduce(0) { $0 + $1.size }
            statistics.slotsUsed = state.writers.values.reduce(0) { $0 + $1.count }
            statistics.heldOutside = state.orphans.values.reduce(0) { $0 + $1.count }
            state.mapped.collect()
            statistics.mappedBytes = state.mapped.totalBytes
            statistics.retiredMapped = state.mapped.retiredCount
            return statistics
        }
    }
}
