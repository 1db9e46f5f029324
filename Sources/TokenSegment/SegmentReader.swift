import CSharedMemory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A reader's read-only mapping of a segment. Everything in it is untrusted: the header is
/// checked once when mapped, and every lookup bounds-checks what it reads, caps its probes, and
/// uses only a copy taken under the slot's sequence counter and validated afterwards.
public final class SegmentReader: @unchecked Sendable {
    /// The segment's generation.
    public let generation: UInt64
    /// The kind whose tokens it holds.
    public let kind: String
    /// The mapping's size.
    public let size: Int

    /// The segment's layout version: ``SegmentLayout/version``, the only one read.
    public var layout: UInt32 { SegmentLayout.version }

    @usableFromInline let base: UnsafeRawPointer
    @usableFromInline let words: SharedWords
    private let slotCount: Int
    @usableFromInline let slotSize: Int
    /// Where slot 0 starts.
    @usableFromInline let tableOffset: Int
    /// The index's entries.
    private let indexCount: Int
    private let seed: (UInt64, UInt64)

    /// How many times a lookup retries a slot it saw change while it copied it.
    public static var tornReadRetries: Int { SegmentLayout.copyAttempts - 1 }

    /// Maps `descriptor` (which the caller keeps or closes) read-only and checks its header
    /// against `expectedSize` and `kind`. Before mapping anything, the file must be sealed against
    /// writing, growing and shrinking (``fsm_is_sealed_against_change``) and be `expectedSize`
    /// bytes: a file its owner could still shrink would kill the reader with SIGBUS.
    public init(descriptor: Int32, expectedSize: Int, kind: String) throws(SegmentError) {
        guard fsm_is_sealed_against_change(fsm_seals(descriptor)) != 0 else {
            throw SegmentError(describing: "segment is not sealed against writing, growing and shrinking")
        }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw SegmentError("fstat") }
        guard expectedSize >= SegmentLayout.headerSize, Int(status.st_size) == expectedSize else {
            throw SegmentError(describing: "segment is \(status.st_size) bytes, not the \(expectedSize) announced")
        }
        let mapped = mmap(nil, expectedSize, PROT_READ, MAP_SHARED, descriptor, 0)
        guard let mapped, mapped != MAP_FAILED else { throw SegmentError("mmap") }
        let base = UnsafeRawPointer(mapped)
        let words = SharedWords(base)
        typealias H = SegmentLayout.Header
        let versionAndHeader = words.load(H.versionAndHeaderSize)
        let (slotCount, slotSize) = SegmentLayout.parts(ofSlots: words.load(H.slotCountAndSize))
        let layout = UInt32(truncatingIfNeeded: versionAndHeader)
        let tableOffset = Int(truncatingIfNeeded: words.load(H.tableOffset))
        let indexCount = Int(truncatingIfNeeded: words.load(H.indexCount))
        let kindLength = Int(min(words.load(H.kindLength), UInt64(SegmentLayout.maxKindLength)))
        var kindBytes: [UInt8] = []
        for index in 0..<kindLength {
            kindBytes.append(UInt8(truncatingIfNeeded: words.load(H.kindBytes + index / 8) >> (8 * UInt64(index % 8))))
        }
        let problem: String? =
            if words.loadAcquiring(H.magic) != SegmentLayout.magic {
                "not a token segment"
            } else if layout != SegmentLayout.version {
                "layout version \(layout), not \(SegmentLayout.version): this reader reads only its own"
            } else if indexCount < 1 || indexCount > SegmentLayout.Index.maxCount {
                "index does not fit the mapping"
            } else if versionAndHeader != SegmentLayout.versionWord
                || tableOffset != SegmentLayout.tableOffset(indexCount: indexCount)
                || words.load(H.segmentSize) != UInt64(expectedSize)
            {
                "header sizes do not match the mapping"
            } else if slotCount == 0 || slotCount > SegmentLayout.Index.maxCount || slotSize % 8 != 0
                || slotSize <= SegmentLayout.slotHeaderSize || slotSize > SegmentLayout.maxSlotSize
                || tableOffset + slotCount * slotSize != expectedSize
            {
                "slot table does not fit the mapping"
            } else if String(decoding: kindBytes, as: UTF8.self) != kind {
                "segment is not of kind \(kind)"
            } else {
                nil
            }
        if let problem {
            munmap(mapped, expectedSize)
            throw SegmentError(describing: problem)
        }
        self.base = base
        self.words = words
        self.size = expectedSize
        self.kind = kind
        self.generation = words.load(H.generation)
        self.slotCount = slotCount
        self.slotSize = slotSize
        self.tableOffset = tableOffset
        self.indexCount = indexCount
        self.seed = (words.load(H.seed0), words.load(H.seed1))
    }

    deinit {
        munmap(UnsafeMutableRawPointer(mutating: base), size)
    }

    /// Whether the writer retired the segment (ask the agent for a new one).
    @inlinable
    public var isRetired: Bool {
        words.loadAcquiring(SegmentLayout.Header.flags) & SegmentLayout.retiredFlag != 0
    }

    /// Whether the writer's heartbeat is older than 3 s at `now` (`CLOCK_BOOTTIME` nanoseconds):
    /// the agent is gone, and the segment is no longer kept current.
    @inlinable
    public func isStale(now: UInt64) -> Bool {
        let beat = words.loadAcquiring(SegmentLayout.Header.heartbeat)
        return now > beat && now - beat > SegmentLayout.staleHeartbeatNanoseconds
    }

    /// The agent's idle time-out: keys read only through memory must be reported more often.
    public var idleTimeoutNanoseconds: UInt64 { words.load(SegmentLayout.Header.idleTimeout) }

    /// A whole, validated copy of the slot that holds an id: its token, expiry (`CLOCK_BOOTTIME`
    /// nanoseconds), lifetime (nanoseconds) and Unix expiry, and the slot's sequence value when
    /// copied. While the slot's sequence keeps that value, the slot holds exactly this.
    public struct SlotCopy: Sendable {
        public let slot: Int
        public let sequence: UInt64
        public let token: String
        public let expiry: UInt64
        public let lifetime: UInt64
        public let unixExpiry: Int64
    }

    /// The slot's sequence value now (acquire): equal to a ``SlotCopy``'s, the copy still holds.
    @inlinable
    public func sequence(ofSlot slot: Int) -> UInt64 {
        SharedWords(base + tableOffset + slot * slotSize).loadAcquiring(SegmentLayout.Slot.sequence)
    }

    /// Whether the segment can answer at `now`: not retired, and the writer's heartbeat is fresh.
    @inlinable
    public func isUsable(now: UInt64) -> Bool { !isRetired && !isStale(now: now) }

    /// Why the segment cannot answer at `now`: retired, or the writer's heartbeat is stale.
    public func unusableReason(now: UInt64) -> String? {
        if isRetired { return "segment retired" }
        if isStale(now: now) { return "agent heartbeat stale" }
        return nil
    }

    /// Whether a token expiring at `expiry` with `lifetime` (nanoseconds) has enough validity left
    /// at `now` by the agent's rule for a GET asking for `minimumValidity` (seconds; `nil`: the
    /// agent's default).
    @inlinable
    public func isServable(expiry: UInt64, lifetime: UInt64, minimumValidity: Double?, now: UInt64) -> Bool {
        guard expiry > now else { return false }
        let remaining = Double(expiry - now) / 1e9
        let defaultValidity = Double(words.load(SegmentLayout.Header.minValidity)) / 1e9
        let floor = Double(words.load(SegmentLayout.Header.servingFloor)) / 1e9
        let required = max(minimumValidity ?? min(defaultValidity, Double(lifetime) / 1e9 / 4), floor)
        return remaining >= required
    }

    /// What a lookup found.
    public enum Lookup: Equatable, Sendable {
        /// The token, with enough validity left by the agent's rule, and its Unix expiry.
        case hit(token: String, unixExpiry: Int64)
        /// No token for the id, or one without enough validity left: ask the agent.
        case miss
        /// The segment cannot answer (retired, stale, torn reads, or damaged): ask the agent.
        case unusable(String)
    }

    /// Looks `id` up at `now` (`CLOCK_BOOTTIME` nanoseconds). A token is a hit when it has at
    /// least `max(minimumValidity ?? min(agent's minimum validity, lifetime / 4), serving floor)`
    /// left: the agent's own rule for a GET.
    public func lookup(id: String, minimumValidity: Double?, now: UInt64) -> Lookup {
        if let reason = unusableReason(now: now) { return .unusable(reason) }
        switch copy(id: id) {
        case .found(let copy):
            guard isServable(expiry: copy.expiry, lifetime: copy.lifetime, minimumValidity: minimumValidity, now: now)
            else { return .miss }
            return .hit(token: copy.token, unixExpiry: copy.unixExpiry)
        case .absent: return .miss
        case .unusable(let reason): return .unusable(reason)
        }
    }

    /// What ``copy(id:)`` found.
    public enum Found: Sendable {
        case found(SlotCopy)
        case absent
        case unusable(String)
    }

    /// A whole copy of the slot holding `id`, read under its sequence counter and validated;
    /// expiry is not judged here.
    public func copy(id: String) -> Found {
        var id = id
        return id.withUTF8 { copy(idBytes: UnsafeRawBufferPointer($0)) }
    }

    private func copy(idBytes: UnsafeRawBufferPointer) -> Found {
        let hash = SipHash24.hash(idBytes, k0: seed.0, k1: seed.1)
        let places = indexCount
        let probes = min(
            Int(min(words.loadAcquiring(SegmentLayout.Header.maxProbe), UInt64(places))),
            SegmentLayout.probeCap
        )
        let dataWords = (slotSize - SegmentLayout.slotHeaderSize) / 8
        var place = SegmentLayout.home(of: hash, slotCount: places)
        return withUnsafeTemporaryAllocation(of: UInt64.self, capacity: dataWords) { buffer -> Found in
            for _ in 0..<probes {
                // The entry is stored (release) after its slot is written: a slot it names is whole.
                let entry = words.loadAcquiring(SegmentLayout.headerSize / 8 + place)
                if entry == SegmentLayout.Index.empty { return .absent }
                guard SegmentLayout.Index.isLive(entry), SegmentLayout.Index.matches(entry, hash: hash) else {
                    place = SegmentLayout.next(place, slotCount: places)
                    continue
                }
                let slot = SegmentLayout.Index.slot(of: entry)
                guard slot < slotCount else { return .unusable("index names a slot past the table") }
                switch copy(slot: slot, idBytes: idBytes, hash: hash, into: buffer, dataWords: dataWords) {
                case .found(let found): return .found(found)
                case .unusable(let reason): return .unusable(reason)
                // Emptied (and maybe reused) after the entry was loaded: the id may be further on.
                case .absent, nil: break
                }
                place = SegmentLayout.next(place, slotCount: places)
            }
            return .absent
        }
    }

    /// Copies `slot` under its sequence counter: `.found` when the whole copy holds `idBytes`
    /// (hash `hash`), `.absent` when the slot holds nothing, `nil` when it holds another id (probe
    /// on either way), `.unusable` when it kept changing or its lengths cannot be.
    private func copy(
        slot: Int,
        idBytes: UnsafeRawBufferPointer,
        hash: UInt64,
        into copy: UnsafeMutableBufferPointer<UInt64>,
        dataWords: Int
    ) -> Found? {
        typealias S = SegmentLayout.Slot
        let slotWords = SharedWords(base + tableOffset + slot * slotSize)
        var attempt = 0
        while true {
            let sequence = slotWords.loadAcquiring(S.sequence)
            if sequence & 1 == 1 {
                attempt += 1
                if attempt > Self.tornReadRetries { return .unusable("slot kept changing") }
                continue
            }
            let meta = slotWords.load(S.meta)
            let slotHash = slotWords.load(S.hash)
            let expiry = slotWords.load(S.expiry)
            let lifetime = slotWords.load(S.lifetime)
            let unixExpiry = Int64(bitPattern: slotWords.load(S.unixExpiry))
            let (state, idLength, tokenLength) = SegmentLayout.parts(ofMeta: meta)
            let idWords = SegmentLayout.padded(idLength) / 8
            let tokenWords = SegmentLayout.padded(tokenLength) / 8
            let candidate = state == SegmentLayout.State.live && slotHash == hash && idLength == idBytes.count
            let inBounds = idWords + tokenWords <= dataWords
            if candidate, inBounds {
                for word in 0..<(idWords + tokenWords) { copy[word] = slotWords.load(S.data + word) }
            }
            atomicMemoryFence(ordering: .acquiring)
            if slotWords.load(S.sequence) != sequence {
                attempt += 1
                if attempt > Self.tornReadRetries { return .unusable("slot kept changing") }
                continue
            }
            // The copy is whole; from here on only the copy is used.
            if state == SegmentLayout.State.empty { return .absent }
            guard candidate else { return nil }
            guard inBounds, tokenLength > 0 else { return .unusable("slot lengths out of bounds") }
            let bytes = UnsafeRawBufferPointer(copy)
            guard memcmp(bytes.baseAddress!, idBytes.baseAddress!, idBytes.count) == 0 else { return nil }
            let tokenBytes = UnsafeRawBufferPointer(rebasing: bytes[(idWords * 8)..<(idWords * 8 + tokenLength)])
            guard let token = String(validating: tokenBytes, as: UTF8.self) else {
                return .unusable("token is not UTF-8")
            }
            return .found(
                SlotCopy(
                    slot: slot,
                    sequence: sequence,
                    token: token,
                    expiry: expiry,
                    lifetime: lifetime,
                    unixExpiry: unixExpiry
                )
            )
        }
    }
}
