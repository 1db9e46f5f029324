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

/// The agent's side of one segment: the only writer. Not thread-safe: its owner serialises every
/// call (one lock per kind).
///
/// Each change follows the seqlock protocol of docs/SHM.md: the slot's sequence counter is made
/// odd, a release fence, the words are stored (relaxed atomics), and the counter is made even
/// with a release store. A replaced or removed token's bytes are zeroed in the same window.
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

    private let base: UnsafeMutableRawPointer
    private let words: SharedWords
    private let seed: (UInt64, UInt64)
    /// Where each id's token is, by the id's UTF-8 bytes (an id is its bytes: two ids Swift's
    /// `String ==` calls equal, such as a precomposed `é` and `e` with a combining accent, are two
    /// keys): the writer's own index, so it never probes to find a key.
    private var index: [[UInt8]: Int] = [:]
    private var tombstones = 0
    private var maxProbe = 0
    /// Whether the segment was retired (wiped, flagged); it takes no more writes.
    public private(set) var isRetired = false

    /// The tokens held.
    public var count: Int { index.count }
    /// The most data (id and token, each padded to a word) any token stored here needed.
    public private(set) var largestData = 0
    /// Whether another key fits under the load factor (3/4 of the slots, tombstones counted).
    public var hasRoomForAnotherKey: Bool { (index.count + tombstones + 1) * 4 <= slotCount * 3 }
    /// The largest id and token lengths a slot holds.
    public func fits(idLength: Int, tokenLength: Int) -> Bool {
        SegmentLayout.slotHeaderSize + SegmentLayout.padded(idLength) + SegmentLayout.padded(tokenLength) <= slotSize
    }

    /// Makes a segment of `slotCount` slots (at least 64) of
    /// `slotSize` bytes, maps it read-write and seals it so no other descriptor or mapping can
    /// ever write, grow or shrink it.
    public init(
        kind: String,
        generation: UInt64,
        slotCount requestedSlots: Int,
        slotSize: Int,
        policy: SegmentPolicy,
        seed: (UInt64, UInt64) = (UInt64.random(in: .min ... .max), UInt64.random(in: .min ... .max))
    ) throws(SegmentError) {
        let slots = max(64, requestedSlots)
        self.kind = kind
        self.generation = generation
        self.slotCount = slots
        self.slotSize = slotSize
        self.seed = seed
        self.size = SegmentLayout.headerSize + slots * slotSize
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
        words.store(H.versionAndHeaderSize, UInt64(SegmentLayout.version) | UInt64(SegmentLayout.headerSize) << 32)
        words.store(H.generation, generation)
        words.store(H.seed0, seed.0)
        words.store(H.seed1, seed.1)
        words.store(H.slotCountAndSize, UInt64(slotCount) | UInt64(slotSize) << 32)
        words.store(H.tableOffset, UInt64(SegmentLayout.headerSize))
        words.store(H.segmentSize, UInt64(size))
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
        var token = token
        return token.withUTF8 { tokenBytes in
            put(
                idBytes: Array(id.utf8),
                token: UnsafeRawBufferPointer(tokenBytes),
                expiry: expiry,
                lifetime: lifetime,
                unixExpiry: unixExpiry
            )
        }
    }

    /// Stores the token whose bytes are `token` for the id whose UTF-8 bytes are `idBytes`,
    /// replacing (and zeroing) the one it held. Parameters as
    /// ``put(id:token:expiry:lifetime:unixExpiry:)``.
    @discardableResult
    public func put(
        idBytes: [UInt8],
        token tokenBytes: UnsafeRawBufferPointer,
        expiry: UInt64,
        lifetime: UInt64,
        unixExpiry: Int64
    ) -> PutOutcome {
        guard !isRetired else { return .retired }
        guard fits(idLength: idBytes.count, tokenLength: tokenBytes.count) else { return .tooLarge }
        let slot: Int
        let idHash: UInt64
        if let existing = index[idBytes] {
            slot = existing
            idHash = slotWords(slot).load(SegmentLayout.Slot.hash)
        } else {
            guard hasRoomForAnotherKey else { return .full }
            idHash = idBytes.withUnsafeBytes { SipHash24.hash($0, k0: seed.0, k1: seed.1) }
            slot = claimSlot(hash: idHash)
            index[idBytes] = slot
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
            slotWords.store(SegmentLayout.Slot.hash, idHash)
            slotWords.store(SegmentLayout.Slot.expiry, expiry)
            slotWords.store(SegmentLayout.Slot.lifetime, lifetime)
            slotWords.store(SegmentLayout.Slot.unixExpiry, UInt64(bitPattern: unixExpiry))
            let idWords = SegmentLayout.padded(idBytes.count) / 8
            let tokenWords = SegmentLayout.padded(tokenBytes.count) / 8
            idBytes.withUnsafeBytes { storeBytes($0, into: slotWords, atWord: SegmentLayout.Slot.data, words: idWords) }
            storeBytes(tokenBytes, into: slotWords, atWord: SegmentLayout.Slot.data + idWords, words: tokenWords)
            // Whatever the old token held beyond the new one is zeroed.
            for word in (idWords + tokenWords)..<max(idWords + tokenWords, oldWords) {
                slotWords.store(SegmentLayout.Slot.data + word, 0)
            }
        }
        return .stored
    }

    /// Removes `id`'s token, zeroing its bytes.
    public func remove(id: String) {
        guard !isRetired, let slot = index.removeValue(forKey: Array(id.utf8)) else { return }
        clear(slot: slot)
        // A tombstone just before a never-used slot ends every chain there: it (and the
        // tombstones before it) can be never-used again, so chains stay short.
        guard state(of: SegmentLayout.next(slot, slotCount: slotCount)) == SegmentLayout.State.empty else { return }
        var current = slot
        while state(of: current) == SegmentLayout.State.tombstone {
            write(slot: current) { $0.store(SegmentLayout.Slot.meta, SegmentLayout.State.empty) }
            tombstones -= 1
            current = current == 0 ? slotCount - 1 : current - 1
        }
    }

    /// Calls `body` with the bytes of the token held for the id whose UTF-8 bytes are `id` (valid
    /// only during the call); returns whether one is held (`false`: `body` was not called). The agent's
    /// own read of its segment: the owner serialises it with every write, so it needs no sequence
    /// check. It probes as a reader does (no `String` of the id is made).
    public func withToken(id: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        guard !isRetired, !index.isEmpty, let idStart = id.baseAddress else { return false }
        let hash = SipHash24.hash(id, k0: seed.0, k1: seed.1)
        var slot = SegmentLayout.home(of: hash, slotCount: slotCount)
        for _ in 0..<maxProbe {
            let slotWords = self.slotWords(slot)
            let meta = slotWords.load(SegmentLayout.Slot.meta)
            let state = meta & 0xff
            if state == SegmentLayout.State.empty { return false }
            if state == SegmentLayout.State.live, slotWords.load(SegmentLayout.Slot.hash) == hash,
                Int(meta >> 16 & 0xffff) == id.count
            {
                let data = UnsafeRawPointer(
                    base + SegmentLayout.headerSize + slot * slotSize + SegmentLayout.slotHeaderSize
                )
                if memcmp(data, idStart, id.count) == 0 {
                    body(UnsafeRawBufferPointer(start: data + SegmentLayout.padded(id.count), count: Int(meta >> 32)))
                    return true
                }
            }
            slot = SegmentLayout.next(slot, slotCount: slotCount)
        }
        return false
    }

    /// Every token held, for copying into a new segment: the id's bytes, the token's bytes (valid
    /// only during the call), expiry, lifetime and Unix expiry. No `String` is made.
    public func forEachToken(_ body: ([UInt8], UnsafeRawBufferPointer, UInt64, UInt64, Int64) -> Void) {
        for (id, slot) in index {
            let slotWords = self.slotWords(slot)
            let meta = slotWords.load(SegmentLayout.Slot.meta)
            let idLength = Int(meta >> 16 & 0xffff)
            let tokenLength = Int(meta >> 32)
            let dataStart = base + SegmentLayout.headerSize + slot * slotSize + SegmentLayout.slotHeaderSize
            body(
                id,
                UnsafeRawBufferPointer(start: dataStart + SegmentLayout.padded(idLength), count: tokenLength),
                slotWords.load(SegmentLayout.Slot.expiry),
                slotWords.load(SegmentLayout.Slot.lifetime),
                Int64(bitPattern: slotWords.load(SegmentLayout.Slot.unixExpiry))
            )
        }
    }

    /// Copies every token held into `other` (a new generation, which its owner sized to take
    /// them all).
    public func copyTokens(into other: SegmentWriter) {
        forEachToken { id, token, expiry, lifetime, unixExpiry in
            other.put(idBytes: id, token: token, expiry: expiry, lifetime: lifetime, unixExpiry: unixExpiry)
        }
    }

    /// Marks the segment retired, then zeroes every slot that held a token: readers ask for a
    /// new segment, and no token lingers here. It takes no more writes.
    public func retire() {
        guard !isRetired else { return }
        words.storeSequentially(SegmentLayout.Header.flags, SegmentLayout.retiredFlag)
        for slot in index.values { clear(slot: slot) }
        index = [:]
        isRetired = true
    }

    // MARK: Slots

    private func slotWords(_ slot: Int) -> SharedWords {
        SharedWords(UnsafeRawPointer(base + SegmentLayout.headerSize + slot * slotSize))
    }

    /// The first never-used or tombstone slot of the probe sequence of `hash`.
    private func claimSlot(hash: UInt64) -> Int {
        var slot = SegmentLayout.home(of: hash, slotCount: slotCount)
        var probe = 1
        while true {
            let state = state(of: slot)
            if state == SegmentLayout.State.empty { break }
            if state == SegmentLayout.State.tombstone {
                tombstones -= 1
                break
            }
            slot = SegmentLayout.next(slot, slotCount: slotCount)
            probe += 1
        }
        if probe > maxProbe {
            maxProbe = probe
            // Before the slot is written: a reader that can see the slot probes far enough.
            words.storeReleasing(SegmentLayout.Header.maxProbe, UInt64(probe))
        }
        return slot
    }

    /// Zeroes `slot`'s words and leaves a tombstone.
    private func clear(slot: Int) {
        write(slot: slot) { slotWords in
            let oldWords = Self.dataWords(meta: slotWords.load(SegmentLayout.Slot.meta))
            slotWords.store(SegmentLayout.Slot.meta, SegmentLayout.State.tombstone)
            for word in SegmentLayout.Slot.hash..<(SegmentLayout.Slot.data + oldWords) { slotWords.store(word, 0) }
        }
        tombstones += 1
    }

    private func state(of slot: Int) -> UInt64 { slotWords(slot).load(SegmentLayout.Slot.meta) & 0xff }

    /// The data words a slot's meta word says are in use.
    private static func dataWords(meta: UInt64) -> Int {
        (SegmentLayout.padded(Int(meta >> 16 & 0xffff)) + SegmentLayout.padded(Int(meta >> 32))) / 8
    }

    /// One seqlock write of `slot`: the counter odd, a release fence, `body`'s stores, the
    /// counter even (release).
    private func write(slot: Int, _ body: (SharedWords) -> Void) {
        let slotWords = self.slotWords(slot)
        let sequence = slotWords.load(SegmentLayout.Slot.sequence)
        slotWords.store(SegmentLayout.Slot.sequence, sequence &+ 1)
        atomicMemoryFence(ordering: .releasing)
        body(slotWords)
        slotWords.storeReleasing(SegmentLayout.Slot.sequence, sequence &+ 2)
    }

    private func storeBytes(_ bytes: [UInt8], atWord first: Int, words count: Int) {
        bytes.withUnsafeBytes { storeBytes($0, into: words, atWord: first, words: count) }
    }

    /// Stores `bytes` as `count` little-endian words from word `first` of `target`, the last one
    /// padded with zeros.
    private func storeBytes(
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

/// The agent's serving rule, as the segment's header carries it.
public struct SegmentPolicy: Sendable, Equatable {
    public var minValidityNanoseconds: UInt64
    public var servingFloorNanoseconds: UInt64
    public var idleTimeoutNanoseconds: UInt64

    /// A rule from seconds: the default minimum validity, the serving floor and the idle time-out.
    public init(minValidity: Double, servingFloor: Double, idleTimeout: Double) {
        minValidityNanoseconds = UInt64(max(0, minValidity) * 1e9)
        servingFloorNanoseconds = UInt64(max(0, servingFloor) * 1e9)
        idleTimeoutNanoseconds = UInt64(max(0, idleTimeout) * 1e9)
    }
}
