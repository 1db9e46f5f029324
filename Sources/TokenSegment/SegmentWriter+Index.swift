// The writer's index and slots: where a key's slot is (its index entry, found by probing as a
// reader does), and each slot's seqlock writes.
import CSharedMemory
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

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
