import CSharedMemory
import Logging
import Synchronization
import TokenSegment
import TokenWire

/// The agent's shared-memory segments: one per configured kind, kept current by the store
/// (``TokenStorage``) before any reply, beaten every second, and replaced by a new generation when
/// one fills up, when the kind's rules change, and at least every 15 minutes (docs/SHM.md).
///
/// A replaced segment is retired: flagged, so readers ask again (and are checked again), and
/// wiped, so no token lingers in it. Each kind's segments are under a lock of their own
/// (``KindSegments``), so one kind's growth or rotation never holds up another's reads; what the
/// kinds share (the generations counted against the limits) is under a second lock, taken after a
/// kind's and never before one. None waits for anything while held.
///
/// The segments are the agent's only copy of the tokens they hold: the store reads them back
/// through ``withToken(kind:id:hint:_:)``. When a kind must go without a segment for a while (a limit
/// stopped its new generation), its tokens are kept here, privately, until a segment can take
/// them again, so no token the store counts on is lost.
///
/// The limits and the generations (opening, growth, replacement, reopening, the builds beside the
/// current segment) are in `SharedSegments+Generations.swift`; the descriptors offered to readers
/// and the counts follow the type in this file.
public final class SharedSegments: TokenStorage, Sendable {
    /// One kind's segments, under their own lock.
    final class KindSegments: Sendable {
        let kind: String
        let state: Mutex<KindState>

        init(kind: String, state: sending KindState) {
            self.kind = kind
            self.state = Mutex(state)
        }
    }

    /// What a kind's lock guards.
    struct KindState {
        /// The current segment; `nil` while a limit leaves the kind without one.
        var writer: SegmentWriter?
        var createdAt: UInt64 = 0
        /// Whether the kind is configured (a kind a reload removed keeps its entry, empty).
        var configured = true
        /// Whether the current segment is not offered yet (a reload is putting new rules in force).
        var withheld = false
        /// The serving rule the kind's segments carry.
        var policy: SegmentPolicy
        /// Tokens kept while a limit leaves the kind without a segment, by the id's UTF-8 bytes
        /// (an id is its bytes), until a segment takes them again: the agent's only copy of them
        /// meanwhile.
        var orphans: [[UInt8]: Orphan] = [:]
        /// The next generation, being built beside the current one (growth or rotation).
        var build: Build?
        /// When an early growth a limit refused may be tried again (boot-clock nanoseconds): a
        /// retired generation still being wiped or read may hold the kind's share for a while.
        var growthNotBefore: UInt64 = 0
        /// Generations a build replaced: retired (flagged), their slots zeroed a batch at a time.
        var wiping: [SegmentWriter] = []
    }

    /// What the kinds share, under its own lock: taken while a kind's is held, never the other way.
    struct Shared {
        var nextGeneration: UInt64
        var recentGenerations: [String: [UInt64]] = [:]
        /// Every generation made that may still be mapped, current or retired.
        var mapped = MappedGenerations()
        var generations = 0
        /// How many kinds are configured (a kind's share of the retired generations' room).
        var kindCount = 0
    }

    /// A kind's next generation being built: it takes every change to the kind, and the current
    /// one's tokens are copied into it from `nextSlot` on.
    struct Build {
        var writer: SegmentWriter
        var nextSlot: Int
        var reason: String
    }

    /// A token kept outside any segment.
    struct Orphan {
        var token: [UInt8]
        var expiry: UInt64
        var lifetime: UInt64
        var unixExpiry: Int64
    }

    /// Every kind ever configured, by name: looked up, then that kind's lock taken (the table's
    /// lock is never held while another is taken).
    private let table: Mutex<[String: KindSegments]>
    /// The first kinds' entries again, found with no lock (each added under the table's lock).
    private let directory = KindDirectory()
    let shared: Mutex<Shared>
    let limits: Limits
    /// The boot clock, in nanoseconds, the generation limits count with: how many generations a
    /// kind made within `generationWindow`, and when a refused growth may be tried again.
    let limitClock: @Sendable () -> UInt64
    let logger: Logger
    let descriptorCount = Atomic(0)
    let notMirroredCount = Atomic(0)
    /// What the heartbeat is woken for: its beat (the ticker of `SegmentHeartbeat`, in
    /// TokenAgentServer), or copying and wiping a store started (a growth beside the segment, the
    /// wipe after a switch).
    public enum Upkeep: Sendable {
        case beat
        case copy
    }

    /// The heartbeat's wake-ups, consumed by one `SegmentHeartbeat` (TokenAgentServer).
    public let upkeep: AsyncStream<Upkeep>
    private let upkeepContinuation: AsyncStream<Upkeep>.Continuation

    /// Segments for `kinds` under the agent's serving rule `policy`, the kinds in `servingFloors`
    /// under a higher serving floor of their own (access tokens: ``TokenProvider/servingFloor``);
    /// `limitClock` is the boot clock the generation limits count with (a test's, to step past a
    /// window).
    public init(
        kinds: some Sequence<String>,
        policy: RefreshPolicy,
        servingFloors: [String: Double] = [:],
        limits: Limits = Limits(),
        logger: Logger,
        limitClock: @escaping @Sendable () -> UInt64 = { fsm_boottime_ns() }
    ) {
        self.limits = limits
        self.limitClock = limitClock
        self.logger = logger
        (upkeep, upkeepContinuation) = AsyncStream.makeStream(of: Upkeep.self, bufferingPolicy: .bufferingNewest(8))
        // Generations count from the milliseconds since boot, so a restarted agent's are higher.
        let configured = Set(kinds)
        shared = Mutex(Shared(nextGeneration: fsm_boottime_ns() / 1_000_000, kindCount: configured.count))
        var entries: [String: KindSegments] = [:]
        for kind in configured {
            let policy = Self.segmentPolicy(policy, floor: servingFloors[kind])
            entries[kind] = KindSegments(kind: kind, state: KindState(policy: policy))
        }
        for kind in configured.sorted() { directory.add(entries[kind]!) }
        table = Mutex(entries)
        for entry in entries.values { entry.state.withLock { open(entry.kind, &$0) } }
    }

    /// What a segment's header tells readers of `policy`, with the serving floor raised to
    /// `floor` when given.
    static func segmentPolicy(_ policy: RefreshPolicy, floor: Double? = nil) -> SegmentPolicy {
        let policy = floor.map { policy.raisingServingFloor(to: $0) } ?? policy
        return SegmentPolicy(
            minValidity: policy.minValidity,
            servingFloor: policy.servingFloor,
            idleTimeout: policy.idleTimeout
        )
    }

    /// The kind's entry, if it was ever configured.
    func entry(_ kind: String) -> KindSegments? {
        directory.withEntry(named: kind, { $0 }) ?? entryPastTheDirectory(kind)
    }

    /// The entry of a kind the directory does not hold: in the table, once the directory is full
    /// (until then every kind is in both).
    private func entryPastTheDirectory(_ kind: String) -> KindSegments? {
        directory.isFull ? table.withLock { $0[kind] } : nil
    }

    /// Every kind's entry.
    func entries() -> [KindSegments] { table.withLock { Array($0.values) } }

    // MARK: TokenStorage

    public func tokenStored(
        kind: String,
        id: String,
        token: String,
        expiry: MonotonicInstant,
        lifetime: Double,
        unixExpiry: UnixTime
    ) -> Bool {
        guard let entry = entry(kind) else { return false }
        let expiryNanos = UInt64(saturatingNanoseconds: expiry.seconds)
        let lifetimeNanos = UInt64(saturatingNanoseconds: lifetime)
        let unix = unixExpiry.wholeSeconds
        return entry.state.withLock { state -> Bool in
            guard state.configured else { return false }
            guard let writer = state.writer else {
                // A configured kind a limit left without a segment: kept with its other tokens,
                // for the segment a beat makes.
                state.orphans[Array(id.utf8)] = Orphan(
                    token: Array(token.utf8),
                    expiry: expiryNanos,
                    lifetime: lifetimeNanos,
                    unixExpiry: unix
                )
                return true
            }
            if !state.orphans.isEmpty { state.orphans.removeValue(forKey: Array(id.utf8)) }
            func put(_ writer: SegmentWriter) -> SegmentWriter.PutOutcome {
                writer.put(id: id, token: token, expiry: expiryNanos, lifetime: lifetimeNanos, unixExpiry: unix)
            }
            var outcome = put(writer)
            if outcome == .full, let built = finishBuild(kind, &state) {
                // Filled before the larger generation being built beside it was done: the rest is
                // copied now, and the token goes to the new one.
                outcome = put(built)
            }
            if outcome == .stored {
                // The generation being built takes every change, so it holds what this one does
                // when it replaces it.
                if let build = state.build, put(build.writer) != .stored { abandonBuild(&state) }
                startGrowthIfFilling(kind, &state)
                return true
            }
            if let grown = grow(kind, &state, idLength: id.utf8.count, tokenLength: token.utf8.count),
                put(grown) == .stored
            {
                return true
            }
            // Left out: the segment must not keep an older token of the key.
            state.writer?.remove(id: id)
            state.build?.writer.remove(id: id)
            notMirroredCount.add(1, ordering: .relaxed)
            return false
        }
    }

    public func reserve(kind: String, tokens: Int, idLength: Int, tokenLength: Int) {
        guard tokens > 0, let entry = entry(kind) else { return }
        entry.state.withLock { state in
            guard state.configured else { return }
            reserve(kind, &state, tokens: tokens, idLength: idLength, tokenLength: tokenLength)
        }
    }

    public func tokenRemoved(kind: String, id: String) {
        entry(kind)?.state.withLock { state in
            state.writer?.remove(id: id)
            state.build?.writer.remove(id: id)
            if !state.orphans.isEmpty { state.orphans.removeValue(forKey: Array(id.utf8)) }
        }
    }

    public func withToken(
        kind: String,
        id: UnsafeRawBufferPointer,
        hint: inout UInt64,
        _ body: (UnsafeRawBufferPointer) -> Void
    ) -> Bool {
        // The kind's entry and its writer are borrowed, not retained: both live while the
        // directory and the lock hold them.
        func read(_ entry: KindSegments) -> Bool {
            entry.state.withLock { state -> Bool in
                if let writer = state.writer.map(LockedWriter.init) {
                    var slotHint = SlotHint(word: hint)
                    defer { hint = slotHint.word }
                    if writer.writer._withUnsafeGuaranteedRef({ $0.withToken(id: id, hint: &slotHint, body) }) {
                        return true
                    }
                }
                guard !state.orphans.isEmpty, let orphan = state.orphans[Array(id)] else { return false }
                orphan.token.withUnsafeBytes(body)
                return true
            }
        }
        if let read = directory.withEntry(named: kind, read) { return read }
        return entryPastTheDirectory(kind).map(read) ?? false
    }

    public func prefetch(hint: UInt64) { SlotHint(word: hint).prefetch() }

    /// A writer handed a caller's closure under the lock. Passed to a writer held in the state,
    /// the closure would tie the whole state to the caller's task as far as the region checker
    /// can tell; the writer is used only for that call, under the lock.
    private struct LockedWriter: @unchecked Sendable {
        let writer: Unmanaged<SegmentWriter>
        init(_ writer: SegmentWriter) { self.writer = .passUnretained(writer) }
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
    /// waiting for a kind's lock go first (`SegmentHeartbeat`, TokenAgentServer).
    public func startBeat() {
        let now = fsm_boottime_ns()
        shared.withLock { $0.mapped.collect() }
        let rotation = UInt64(saturatingNanoseconds: limits.rotationInterval)
        for entry in entries() {
            entry.state.withLock { state in
                guard state.configured else { return }
                state.writer?.beat(now: now)
                if state.writer != nil, state.build == nil, now &- state.createdAt >= rotation {
                    if !startBuild(entry.kind, &state, reason: "rotation") {
                        replace(entry.kind, &state, reason: "rotation")
                    }
                }
                // A kind a limit left without a segment gets one again as soon as the limit allows.
                if state.writer == nil { reopen(entry.kind, &state) }
            }
        }
    }

    /// Copies one batch into every generation being built (switching to those done), and zeroes
    /// one batch of every generation they replaced, each kind under its own lock; whether any work
    /// is left.
    public func advanceBuilding(batch: Int) -> Bool {
        var more = false
        for entry in entries() where entry.state.withLock({ advanceBuild(entry.kind, &$0, batch: batch) }) {
            more = true
        }
        return more
    }

    /// Wakes the heartbeat for `reason`.
    public func requestUpkeep(_ reason: Upkeep) {
        upkeepContinuation.yield(reason)
    }

    /// Slots copied into a generation being built per hold of the lock: about 0.1 ms of copying.
    public static let buildBatch = 256

    /// A reload: segments for exactly `kinds`, the serving rule `policy` (with the kinds in
    /// `servingFloors` under a higher floor of their own), and a new generation for each kind in
    /// `rulesChanged` (its readers must be checked again). The new generations are withheld (not
    /// offered) until ``offer(_:)`` once the new rules are in force: no reader of an old segment
    /// sees a token written after this, and none gets a new one under old rules.
    public func reconfigure(
        kinds: Set<String>,
        policy: RefreshPolicy,
        servingFloors: [String: Double] = [:],
        rulesChanged: Set<String>
    ) {
        let basePolicy = Self.segmentPolicy(policy)
        shared.withLock { $0.kindCount = kinds.count }
        let all = table.withLock { table -> [KindSegments] in
            for kind in kinds.sorted() where table[kind] == nil {
                let policy = Self.segmentPolicy(policy, floor: servingFloors[kind])
                let entry = KindSegments(kind: kind, state: KindState(policy: policy))
                table[kind] = entry
                directory.add(entry)
            }
            return Array(table.values)
        }
        for entry in all {
            entry.state.withLock { state in
                let kind = entry.kind
                guard kinds.contains(kind) else {
                    retireKind(&state, policy: basePolicy)
                    return
                }
                let segmentPolicy = Self.segmentPolicy(policy, floor: servingFloors[kind])
                // A generation being built would miss this reload's changes to its kind's segment
                // (a growth may start again); one a build replaced is wiped before the new rules
                // are in force.
                settle(&state)
                state.growthNotBefore = 0
                state.configured = true
                state.policy = segmentPolicy
                state.writer?.update(segmentPolicy)
                if rulesChanged.contains(kind) {
                    state.withheld = true
                    replace(kind, &state, reason: "rules changed")
                }
                // New kinds, and kinds a limit left without a segment, under the limits like any other.
                if state.writer == nil { reopen(kind, &state) }
            }
        }
    }

    /// Offers the segments of `kinds` again (after a reload put their new rules in force).
    public func offer(_ kinds: Set<String>) {
        for kind in kinds { entry(kind)?.state.withLock { $0.withheld = false } }
    }

    /// Retires every segment (a clean stop): readers stop using them, and their tokens are wiped.
    public func retireAll() {
        shared.withLock { $0.kindCount = 0 }
        for entry in entries() {
            entry.state.withLock { state in
                retireKind(&state, policy: state.policy)
            }
        }
    }

    /// Abandons the kind's build and finishes its wipes at once: a reload's changes, or a stop,
    /// must not wait for the heartbeat.
    private func settle(_ state: inout KindState) {
        abandonBuild(&state)
        for writer in state.wiping { writer.retire() }
        state.wiping = []
    }

    /// Retires everything the kind holds (its segment wiped, its kept tokens dropped): it is no
    /// longer configured.
    private func retireKind(_ state: inout KindState, policy: SegmentPolicy) {
        settle(&state)
        if let writer = state.writer { retire(writer) }
        state = KindState(configured: false, policy: policy)
    }
}

// MARK: The descriptors the `SHM` verb hands readers: a read-only re-open of a kind's current
// segment, one per generation a connection has not had yet.
extension SharedSegments {
    /// A read-only descriptor of a kind's current segment, for one peer.
    public struct Offer: Sendable {
        /// The descriptor (the receiver of the offer closes it).
        public var descriptor: Int32
        public var size: Int
        public var generation: UInt64
        public var kind: String
    }

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
        guard let entry = entry(kind) else { return .none }
        return entry.state.withLock { state -> OfferOutcome in
            guard let writer = state.writer, !state.withheld else { return .none }
            if alreadySent(writer.generation) { return .alreadySent(generation: writer.generation) }
            let descriptor = fsm_reopen_read_only(writer.descriptor)
            guard descriptor >= 0 else { return .none }
            descriptorCount.add(1, ordering: .relaxed)
            return .offered(Offer(descriptor: descriptor, size: writer.size, generation: writer.generation, kind: kind))
        }
    }
}

// MARK: The segments' counts, for STATS and metrics.
extension SharedSegments {
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
    }

    /// The segments' counts.
    public func statistics() -> Statistics {
        var statistics = Statistics()
        for entry in entries() {
            entry.state.withLock { state in
                guard let writer = state.writer else {
                    statistics.heldOutside += state.orphans.count
                    return
                }
                statistics.segments += 1
                statistics.bytes += writer.size
                statistics.slotsUsed += writer.count
                statistics.heldOutside += state.orphans.count
            }
        }
        shared.withLock { shared in
            shared.mapped.collect()
            statistics.generations = shared.generations
            statistics.mappedBytes = shared.mapped.totalBytes
            statistics.retiredMapped = shared.mapped.retiredCount
        }
        statistics.descriptors = descriptorCount.load(ordering: .relaxed)
        statistics.notMirrored = notMirroredCount.load(ordering: .relaxed)
        return statistics
    }
}
