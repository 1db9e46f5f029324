import CSharedMemory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Why a segment could not be made.
public struct SegmentError: Error, CustomStringConvertible {
    /// What failed.
    public var description: String

    init(_ what: String) { description = "\(what): \(String(cString: strerror(errno)))" }
    init(describing: String) { description = describing }
}

/// The agent's side of one segment (layout 2): the only writer. Not thread-safe: its owner
/// serialises every call (one lock per kind).
///
/// Each change to a slot follows the seqlock protocol of docs/SHM.md: the slot's sequence counter
/// is made odd, a release fence, the words are stored (relaxed atomics), and the counter is made
/// even with a release store. A replaced or removed token's bytes are zeroed in the same window.
/// A new key's slot is written before its index entry is stored (release); a removed key's entry
/// is marked removed before its slot is cleared. Slots are handed out densely from the start of
/// the table, a freed one first, so only the pages of slots in use are touched. The writer keeps
/// no copy of the ids: it finds a key by probing its own index, as a reader does.
///
/// After the type come its index and the slots' writes, then the copying of the tokens into the
/// next generation.
public final class SegmentWriter {
    /// The kind whose tokens the segment holds.
    public let kind: String
    /// The segment's generation.
    public let generation: UInt64
    /// The memory file (read-write, sealed against any other writer).
    public let descriptor: Int32
    /// The segment's size in bytes.
    public let size: Int
    /// The number of slots and each one's size.
    public let slotCount: Int
    public let slotSize: Int
    /// The index's entries: twice the slots.
    public let indexCount: Int

    let base: UnsafeMutableRawPointer
    let words: SharedWords
    let tableOffset: Int
    private let seed: (UInt64, UInt64)
    /// Slots freed by removals, reused first (last freed first: its pages are warm).
    var freeSlots: [Int32] = []
    // The three counts a read checks (`withToken`) are `@exclusivity(unchecked)`: the writer is
    // used by one thread at a time (its owner's lock), so Swift's dynamic exclusivity checks of a
    // class's stored properties would prove nothing, at three runtime calls (about 76
    // instructions) per socket GET (docs/BENCHMARKS-METHOD.md, "instructions per socket GET").
    /// Slots below this have been used; the next new slot is this one when none is free.
    @exclusivity(unchecked) var usedSlots = 0
    @exclusivity(unchecked) private var live = 0
    /// Index entries marked removed.
    private var removedEntries = 0
    private var maxProbe = 0
    /// Whether the segment was retired (flagged, then wiped); it takes no more writes.
    @exclusivity(unchecked) public private(set) var isRetired = false
    /// Slots below this are zeroed since the segment was retired.
    private var wiped = 0

    /// The tokens held.
    public var count: Int { live }
    /// The most data (id and token, each padded to a word) any token stored here needed.
    public private(set) var largestData = 0
    /// Whether another key fits: a free slot, and the index under three quarters full with
    /// removed entries counted.
    public var hasRoomForAnotherKey: Bool {
        live < slotCount && (live + removedEntries + 1) * 4 <= indexCount * 3
    }
    /// The largest id and token lengths a slot holds.
    public func fits(idLength: Int, tokenLength: Int) -> Bool {
        SegmentLayout.slotHeaderSize + SegmentLayout.padded(idLength) + SegmentLayout.padded(tokenLength) <= slotSize
    }

    /// Makes a segment of `slotCount` slots (at least 64) of `slotSize` bytes with twice as many
    /// index entries, maps it read-write and seals it so no other descriptor or mapping can ever
    /// write, grow or shrink it.
    public init(
        kind: String,
        generation: UInt64,
        slotCount requestedSlots: Int,
        slotSize: Int,
        policy: SegmentPolicy,
        seed: (UInt64, UInt64) = (UInt64.random(in: .min ... .max), UInt64.random(in: .min ... .max))
    ) throws(SegmentError) {
        let slots = Self.slots(requested: requestedSlots)
        self.kind = kind
        self.generation = generation
        self.slotCount = slots
        self.slotSize = slotSize
        self.indexCount = 2 * slots
        self.seed = seed
        self.tableOffset = SegmentLayout.tableOffset(indexCount: 2 * slots)
        self.size = Self.size(slotCount: slots, slotSize: slotSize)
        let fd = fsm_memfd_create("fleet-tokend-\(kind)")
        guard fd >= 0 else { throw SegmentError("memfd_create") }
        guard ftruncate(fd, off_t(size)) == 0 else {
            let error = SegmentError("ftruncate")
            close(fd)
            throw error
        }
        let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        guard let mapped, mapped != MAP_FAILED else {
            let error = SegmentError("mmap")
            close(fd)
            throw error
        }
        guard fsm_seal_read_only(fd) == 0 else {
            let error = SegmentError("sealing")
            munmap(mapped, size)
            close(fd)
            throw error
        }
        self.descriptor = fd
        self.base = mapped
        _ = mapped.bindMemory(to: Atomic<UInt64>.self, capacity: size / 8)
        self.words = SharedWords(UnsafeRawPointer(mapped))
        writeHeader(policy: policy)
    }

    deinit {
        munmap(base, size)
        close(descriptor)
    }

    private func writeHeader(policy: SegmentPolicy) {
        typealias H = SegmentLayout.Header
        words.store(H.versionAndHeaderSize, SegmentLayout.versionWord)
        words.store(H.generation, generation)
        words.store(H.seed0, seed.0)
        words.store(H.seed1, seed.1)
        words.store(H.slotCountAndSize, SegmentLayout.slotsWord(count: slotCount, size: slotSize))
        words.store(H.tableOffset, UInt64(tableOffset))
        words.store(H.segmentSize, UInt64(size))
        words.store(H.indexCount, UInt64(indexCount))
        let name = Array(kind.utf8.prefix(32))
        words.store(H.kindLength, UInt64(name.count))
        storeBytes(name, atWord: H.kindBytes, words: 4)
        update(policy)
        beat(now: fsm_boottime_ns())
        // Last, with release: a reader that sees the magic sees the rest.
        words.storeReleasing(H.magic, SegmentLayout.magic)
    }

    /// Puts the agent's serving rule in the header (at creation and after a reload).
    public func update(_ policy: SegmentPolicy) {
        typealias H = SegmentLayout.Header
        words.store(H.minValidity, policy.minValidityNanoseconds)
        words.store(H.servingFloor, policy.servingFloorNanoseconds)
        words.storeReleasing(H.idleTimeout, policy.idleTimeoutNanoseconds)
    }

    /// Writes the heartbeat: `now` on `CLOCK_BOOTTIME`, nanoseconds.
    public func beat(now: UInt64) {
        words.storeReleasing(SegmentLayout.Header.heartbeat, now)
    }

    /// What ``put(id:token:expiry:lifetime:unixExpiry:)`` did.
    public enum PutOutcome: Equatable, Sendable {
        /// The token is in the segment.
        case stored
        /// No room for another key: the owner makes a larger segment.
        case full
        /// The id and token do not fit a slot: the owner makes one with larger slots.
        case tooLarge
        /// The segment is retired: it takes no more writes, and holds nothing.
        case retired
    }

    /// Stores `token` for `id`, replacing (and zeroing) the one it held.
    /// - Parameters:
    ///   - expiry: the token's expiry, `CLOCK_BOOTTIME` nanoseconds.
    ///   - lifetime: its lifetime as fetched, nanoseconds.
    ///   - unixExpiry: its expiry, Unix seconds.
    @discardableResult
    public func put(id: String, token: String, expiry: UInt64, lifetime: UInt64, unixExpiry: Int64) -> PutOutcome {
        var id = id
        var token = token
        return id.withUTF8 { idBytes in
            token.withUTF8 { tokenBytes in
                put(
                    idBytes: UnsafeRawBufferPointer(idBytes),
                    token: UnsafeRawBufferPointer(tokenBytes),
                    expiry: expiry,
                    lifetime: lifetime,
                    unixExpiry: unixExpiry
                )
            }
        }
    }

    /// Stores the token whose bytes are `token` for the id whose UTF-8 bytes are `idBytes`,
    /// replacing (and zeroing) the one it held. Parameters as
    /// ``put(id:token:expiry:lifetime:unixExpiry:)``.
    @discardableResult
    public func put(
        idBytes: UnsafeRawBufferPointer,
        token tokenBytes: UnsafeRawBufferPointer,
        expiry: UInt64,
        lifetime: UInt64,
        unixExpiry: Int64
    ) -> PutOutcome {
        guard !isRetired else { return .retired }
        guard fits(idLength: idBytes.count, tokenLength: tokenBytes.count) else { return .tooLarge }
        let hash = SipHash24.hash(idBytes, k0: seed.0, k1: seed.1)
        let found = find(idBytes, hash: hash)
        let slot: Int
        if let existing = found.slot {
            slot = existing
        } else {
            guard hasRoomForAnotherKey, !SegmentLayout.Index.isLive(indexEntry(found.entry)) else { return .full }
            slot = claimSlot()
        }
        largestData = max(largestData, SegmentLayout.padded(idBytes.count) + SegmentLayout.padded(tokenBytes.count))
        write(slot: slot) { slotWords in
            let oldWords = Self.dataWords(meta: slotWords.load(SegmentLayout.Slot.meta))
            slotWords.store(
                SegmentLayout.Slot.meta,
                SegmentLayout.meta(
                    state: SegmentLayout.State.live,
                    idLength: idBytes.count,
                    tokenLength: tokenBytes.count
                )
            )
            slotWords.store(SegmentLayout.Slot.hash, hash)
            slotWords.store(SegmentLayout.Slot.expiry, expiry)
            slotWords.store(SegmentLayout.Slot.lifetime, lifetime)
            slotWords.store(SegmentLayout.Slot.unixExpiry, UInt64(bitPattern: unixExpiry))
            let idWords = SegmentLayout.padded(idBytes.count) / 8
            let tokenWords = SegmentLayout.padded(tokenBytes.count) / 8
            storeBytes(idBytes, into: slotWords, atWord: SegmentLayout.Slot.data, words: idWords)
            storeBytes(tokenBytes, into: slotWords, atWord: SegmentLayout.Slot.data + idWords, words: tokenWords)
            // Whatever the old token held beyond the new one is zeroed.
            for word in (idWords + tokenWords)..<max(idWords + tokenWords, oldWords) {
                slotWords.store(SegmentLayout.Slot.data + word, 0)
            }
        }
        if found.slot == nil {
            // The slot is complete before any reader can find it.
            if found.probe > maxProbe {
                maxProbe = found.probe
                words.storeReleasing(SegmentLayout.Header.maxProbe, UInt64(found.probe))
            }
            if SegmentLayout.Index.isRemoved(indexEntry(found.entry)) { removedEntries -= 1 }
            storeIndexEntry(found.entry, SegmentLayout.Index.entry(hash: hash, slot: slot))
            live += 1
        }
        return .stored
    }

    /// Removes `id`'s token, zeroing its bytes.
    public func remove(id: String) {
        var id = id
        id.withUTF8 { remove(idBytes: UnsafeRawBufferPointer($0)) }
    }

    /// Removes the token of the id whose UTF-8 bytes are `idBytes`, zeroing its bytes.
    public func remove(idBytes: UnsafeRawBufferPointer) {
        guard !isRetired, live > 0 else { return }
        let found = find(idBytes, hash: SipHash24.hash(idBytes, k0: seed.0, k1: seed.1))
        guard let slot = found.slot else { return }
        // No reader finds the slot from here on; one that found it before sees it change.
        storeIndexEntry(found.entry, SegmentLayout.Index.removed)
        removedEntries += 1
        live -= 1
        clear(slot: slot)
        freeSlots.append(Int32(slot))
        // Removed entries just before a never-used one end every probe there: they (and the
        // removed ones before them) can be never-used again, so probe sequences stay short.
        guard indexEntry(SegmentLayout.next(found.entry, slotCount: indexCount)) == SegmentLayout.Index.empty else {
            return
        }
        var entry = found.entry
        while SegmentLayout.Index.isRemoved(indexEntry(entry)) {
            storeIndexEntry(entry, SegmentLayout.Index.empty)
            removedEntries -= 1
            entry = entry == 0 ? indexCount - 1 : entry - 1
        }
    }

    /// Calls `body` with the bytes of the token held for the id whose UTF-8 bytes are `id` (valid
    /// only during the call); returns whether one is held (`false`: `body` was not called). The
    /// agent's own read of its segment: the owner serialises it with every write, so it needs no
    /// sequence check. It probes as a reader does (no `String` of the id is made).
    public func withToken(id: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        var hint = SlotHint.none
        return withToken(id: id, hint: &hint, body)
    }

    /// As ``withToken(id:_:)``, trying the slot `hint` names first: when it is a slot of this
    /// segment's that is live and holds the id, neither the id's hash nor the index is needed (a
    /// random cache line and about a hundred instructions fewer on the agent's socket GET).
    /// Otherwise the id is found by its hash and `hint` is set to where it is (``SlotHint/none``
    /// when it is not held).
    public func withToken(
        id: UnsafeRawBufferPointer,
        hint: inout SlotHint,
        _ body: (UnsafeRawBufferPointer) -> Void
    ) -> Bool {
        guard !isRetired, live > 0 else { return false }
        let slot: Int
        if let hinted = self.slot(at: hint.address), holds(slot: hinted, id) {
            slot = hinted
        } else {
            guard let found = find(id, hash: SipHash24.hash(id, k0: seed.0, k1: seed.1)).slot else {
                hint = .none
                return false
            }
            slot = found
        }
        let meta = slotWords(slot).load(SegmentLayout.Slot.meta)
        let tokenLength = SegmentLayout.parts(ofMeta: meta).tokenLength
        let data = UnsafeRawPointer(slotAddress(slot) + SegmentLayout.slotHeaderSize)
        hint = SlotHint(
            address: UnsafeRawPointer(slotAddress(slot)),
            bytes: SegmentLayout.slotHeaderSize + SegmentLayout.padded(id.count) + tokenLength
        )
        body(UnsafeRawBufferPointer(start: data + SegmentLayout.padded(id.count), count: tokenLength))
        return true
    }

    /// The slot in use whose address is `address`, if it is one of this mapping's.
    private func slot(at address: UInt) -> Int? {
        let first = UInt(bitPattern: base + tableOffset)
        guard address >= first else { return nil }
        let (slot, offset) = (address - first).quotientAndRemainder(dividingBy: UInt(slotSize))
        guard offset == 0, slot < UInt(usedSlots) else { return nil }
        return Int(slot)
    }

    /// The size of a segment of `slotCount` slots of `slotSize` bytes, as ``init`` makes it.
    public static func size(slotCount: Int, slotSize: Int) -> Int {
        let slots = slots(requested: slotCount)
        return SegmentLayout.tableOffset(indexCount: 2 * slots) + slots * slotSize
    }

    /// The slots a segment asked for `requested` gets: at least 64, and few enough for the
    /// index's 32-bit slot numbers.
    private static func slots(requested: Int) -> Int { min(max(64, requested), SegmentLayout.Index.maxCount / 2) }

    /// Marks the segment retired, then zeroes every slot that held a token: readers ask for a
    /// new segment, and no token lingers here. It takes no more writes.
    public func retire() {
        markRetired()
        while wipe(count: usedSlots) {}
    }

    /// Sets the retired flag (readers ask for a new segment) and takes no more writes; the slots
    /// are zeroed by ``wipe(count:)``.
    public func markRetired() {
        guard !isRetired else { return }
        words.storeSequentially(SegmentLayout.Header.flags, SegmentLayout.retiredFlag)
        live = 0
        isRetired = true
    }

    /// Zeroes the next `count` slots of a retired segment (those that held a token); whether
    /// slots are left to zero.
    public func wipe(count: Int) -> Bool {
        guard isRetired else { return false }
        let end = min(usedSlots, wiped + count)
        for slot in wiped..<end {
            let meta = slotWords(slot).load(SegmentLayout.Slot.meta)
            if SegmentLayout.parts(ofMeta: meta).state != SegmentLayout.State.empty { clear(slot: slot) }
        }
        wiped = end
        return wiped < usedSlots
    }
}

// MARK: The writer's index and slots: where a key's slot is (its index entry, found by probing as a
// reader does), and each slot's seqlock writes.
extension SegmentWriter {
    /// Where `idBytes` (whose hash is `hash`) is: its index entry and slot when held; otherwise the
    /// entry a new key takes (the first removed or never-used one on its probe sequence) and the
    /// probe length to it.
    func find(_ idBytes: UnsafeRawBufferPointer, hash: UInt64) -> (entry: Int, slot: Int?, probe: Int) {
        var entry = SegmentLayout.home(of: hash, slotCount: indexCount)
        var firstRemoved: (entry: Int, probe: Int)?
        var probe = 1
        while true {
            let value = indexEntry(entry)
            if value == SegmentLayout.Index.empty { break }
            if SegmentLayout.Index.isRemoved(value) {
                if firstRemoved == nil { firstRemoved = (entry, probe) }
            } else if SegmentLayout.Index.matches(value, hash: hash) {
                let slot = SegmentLayout.Index.slot(of: value)
                if holds(slot: slot, idBytes, hash: hash) { return (entry, slot, probe) }
            }
            // Never more than every entry: the index always has a never-used one (it is kept
            // under three quarters full), so this only bounds a damaged state.
            if probe >= indexCount { break }
            entry = SegmentLayout.next(entry, slotCount: indexCount)
            probe += 1
        }
        if let firstRemoved { return (firstRemoved.entry, nil, firstRemoved.probe) }
        return (entry, nil, probe)
    }

    /// Whether `slot` holds the id whose bytes are `idBytes` and hash is `hash`.
    func holds(slot: Int, _ idBytes: UnsafeRawBufferPointer, hash: UInt64) -> Bool {
        slotWords(slot).load(SegmentLayout.Slot.hash) == hash && holds(slot: slot, idBytes)
    }

    /// Whether `slot` is live and holds the id whose bytes are `idBytes`. A live slot holding the
    /// id is the id's one slot: a key is in at most one, and a freed slot is emptied.
    func holds(slot: Int, _ idBytes: UnsafeRawBufferPointer) -> Bool {
        let meta = slotWords(slot).load(SegmentLayout.Slot.meta)
        let parts = SegmentLayout.parts(ofMeta: meta)
        guard parts.state == SegmentLayout.State.live, parts.idLength == idBytes.count else { return false }
        guard let idStart = idBytes.baseAddress else { return true }
        return memcmp(slotAddress(slot) + SegmentLayout.slotHeaderSize, idStart, idBytes.count) == 0
    }

    func indexEntry(_ entry: Int) -> UInt64 { words.load(SegmentLayout.headerSize / 8 + entry) }

    func storeIndexEntry(_ entry: Int, _ value: UInt64) {
        words.storeReleasing(SegmentLayout.headerSize / 8 + entry, value)
    }

    // MARK: Slots

    func slotAddress(_ slot: Int) -> UnsafeMutableRawPointer { base + tableOffset + slot * slotSize }

    func slotWords(_ slot: Int) -> SharedWords { SharedWords(UnsafeRawPointer(slotAddress(slot))) }

    /// A slot for a new key: the last freed one, else the first never used.
    func claimSlot() -> Int {
        if let freed = freeSlots.popLast() { return Int(freed) }
        usedSlots += 1
        return usedSlots - 1
    }

    /// Zeroes `slot`'s words: it holds nothing.
    func clear(slot: Int) {
        write(slot: slot) { slotWords in
            let oldWords = Self.dataWords(meta: slotWords.load(SegmentLayout.Slot.meta))
            slotWords.store(SegmentLayout.Slot.meta, SegmentLayout.State.empty)
            for word in SegmentLayout.Slot.hash..<(SegmentLayout.Slot.data + oldWords) { slotWords.store(word, 0) }
        }
    }

    /// The data words a slot's meta word says are in use.
    static func dataWords(meta: UInt64) -> Int {
        let parts = SegmentLayout.parts(ofMeta: meta)
        return (SegmentLayout.padded(parts.idLength) + SegmentLayout.padded(parts.tokenLength)) / 8
    }

    /// One seqlock write of `slot`: the counter odd, a release fence, `body`'s stores, the
    /// counter even (release).
    func write(slot: Int, _ body: (SharedWords) -> Void) {
        let slotWords = self.slotWords(slot)
        let sequence = slotWords.load(SegmentLayout.Slot.sequence)
        slotWords.store(SegmentLayout.Slot.sequence, sequence &+ 1)
        atomicMemoryFence(ordering: .releasing)
        body(slotWords)
        slotWords.storeReleasing(SegmentLayout.Slot.sequence, sequence &+ 2)
    }

    func storeBytes(_ bytes: [UInt8], atWord first: Int, words count: Int) {
        bytes.withUnsafeBytes { storeBytes($0, into: words, atWord: first, words: count) }
    }

    /// Stores `bytes` as `count` little-endian words from word `first` of `target`, the last one
    /// padded with zeros.
    func storeBytes(
        _ bytes: UnsafeRawBufferPointer,
        into target: SharedWords,
        atWord first: Int,
        words count: Int
    ) {
        for word in 0..<count {
            let start = word * 8
            var value: UInt64 = 0
            if start + 8 <= bytes.count {
                value = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: start, as: UInt64.self))
            } else {
                for byte in 0..<8 where start + byte < bytes.count {
                    value |= UInt64(bytes[start + byte]) << (8 * UInt64(byte))
                }
            }
            target.store(first + word, value)
        }
    }
}

// MARK: Copying a segment's tokens into the next generation: all at once, or a batch of slots at a
// time while the current one goes on serving (docs/SHM.md, "Generations").
extension SegmentWriter {
    /// Every token held, for copying into a new segment: the id's bytes and the token's bytes
    /// (both valid only during the call), expiry, lifetime and Unix expiry. No `String` is made.
    public func forEachToken(
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UInt64, UInt64, Int64) -> Void
    ) {
        _ = forEachToken(inSlots: 0..<usedSlots) { id, token, expiry, lifetime, unixExpiry in
            body(id, token, expiry, lifetime, unixExpiry)
            return true
        }
    }

    /// Copies every token held into `other` (a new generation, which its owner sized to take
    /// them all).
    public func copyTokens(into other: SegmentWriter) {
        forEachToken { id, token, expiry, lifetime, unixExpiry in
            other.put(idBytes: id, token: token, expiry: expiry, lifetime: lifetime, unixExpiry: unixExpiry)
        }
    }

    /// Copies the tokens of up to `count` slots from `first` on into `other`, for a new
    /// generation built a batch at a time; the slot to go on from, or `nil` when every slot ever
    /// used has been copied. `false` in `stored` when `other` refused one (full or too small).
    public func copyTokens(into other: SegmentWriter, fromSlot first: Int, count: Int, stored: inout Bool) -> Int? {
        let end = first + min(count, max(0, usedSlots - first))
        stored = forEachToken(inSlots: first..<max(first, end)) { id, token, expiry, lifetime, unixExpiry in
            other.put(idBytes: id, token: token, expiry: expiry, lifetime: lifetime, unixExpiry: unixExpiry) == .stored
        }
        return stored && end < usedSlots ? end : nil
    }

    /// Calls `body` with the token of every live slot in `slots` (as ``forEachToken(_:)``), until
    /// it returns `false`; whether it never did.
    private func forEachToken(
        inSlots slots: Range<Int>,
        _ body: (UnsafeRawBufferPointer, UnsafeRawBufferPointer, UInt64, UInt64, Int64) -> Bool
    ) -> Bool {
        for slot in slots {
            let slotWords = self.slotWords(slot)
            let meta = slotWords.load(SegmentLayout.Slot.meta)
            let (state, idLength, tokenLength) = SegmentLayout.parts(ofMeta: meta)
            guard state == SegmentLayout.State.live else { continue }
            let dataStart = UnsafeRawPointer(slotAddress(slot) + SegmentLayout.slotHeaderSize)
            let going = body(
                UnsafeRawBufferPointer(start: dataStart, count: idLength),
                UnsafeRawBufferPointer(start: dataStart + SegmentLayout.padded(idLength), count: tokenLength),
                slotWords.load(SegmentLayout.Slot.expiry),
                slotWords.load(SegmentLayout.Slot.lifetime),
                Int64(bitPattern: slotWords.load(SegmentLayout.Slot.unixExpiry))
            )
            if !going { return false }
        }
        return true
    }
}
