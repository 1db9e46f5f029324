import CSharedMemory
import Foundation
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// A segment built word by word from docs/SHM.md rather than by the agent's writer, so that a test
/// can hand a reader exactly the index entries and slots its case needs, however damaged.
///
/// Layout 2: the header, `indexCount` index entries from byte 256, then `slotCount` slots from the
/// table offset (`256 + 8 * indexCount` rounded up to 64). Layout 1, no longer read (for the tests
/// that readers refuse it): the slots from byte 256. The kind is `vehicle`, the heartbeat an hour
/// ahead (never stale), the max probe the whole index (layout 2) or table (layout 1), and every
/// entry and slot unused until a test stores one.
struct SegmentImage {
    static let headerSize = 256
    static let hourNanoseconds: UInt64 = 3_600_000_000_000
    /// Index entry values of layout 2: never used, and the low 32 bits of a removed one.
    static let neverUsed: UInt64 = 0
    static let removedSlotBits: UInt64 = 0xFFFF_FFFF

    /// Header words by byte offset / 8 (docs/SHM.md, "Header").
    enum Word {
        static let magic = 0
        static let versionAndHeaderSize = 1
        static let generation = 2
        static let heartbeat = 4
        static let k0 = 5
        static let k1 = 6
        static let slots = 7
        static let tableOffset = 8
        static let segmentSize = 9
        static let maxProbe = 10
        static let minValidity = 11
        static let servingFloor = 12
        static let idleTimeout = 13
        static let kindLength = 14
        static let kind = 15
        static let indexCount = 19
    }

    let layout: Int
    let indexCount: Int
    let slotCount: Int
    let slotSize: Int
    /// Where slot 0 starts, bytes.
    let tableOffset: Int
    let k0: UInt64 = 0x0706_0504_0302_0100
    let k1: UInt64 = 0x0f0e_0d0c_0b0a_0908
    /// The segment's words, little-endian on this host as in the file.
    private(set) var words: [UInt64]

    /// Bytes in the segment: the size its `SHM` reply announces.
    var size: Int { words.count * 8 }

    /// A segment of `layout` with `indexCount` entries (layout 2 only) and `slotCount` slots of
    /// `slotSize` bytes; `tableOffset` other than the layout's own builds the slots from there
    /// (the file's size follows it).
    init(layout: Int = 2, indexCount: Int = 16, slotCount: Int = 8, slotSize: Int = 256, tableOffset: Int? = nil) {
        self.layout = layout
        self.indexCount = layout == 2 ? indexCount : 0
        self.slotCount = slotCount
        self.slotSize = slotSize
        let table = tableOffset ?? (layout == 2 ? (Self.headerSize + 8 * indexCount + 63) & ~63 : Self.headerSize)
        self.tableOffset = table
        words = [UInt64](repeating: 0, count: (table + slotCount * slotSize) / 8)
        words[Word.magic] = 0x3130_4D48_534B_5446
        words[Word.versionAndHeaderSize] = UInt64(layout) | UInt64(Self.headerSize) << 32
        words[Word.generation] = 7
        words[Word.heartbeat] = fsm_boottime_ns() + Self.hourNanoseconds
        words[Word.k0] = k0
        words[Word.k1] = k1
        words[Word.slots] = UInt64(slotCount) | UInt64(slotSize) << 32
        words[Word.tableOffset] = UInt64(table)
        words[Word.segmentSize] = UInt64(words.count * 8)
        words[Word.maxProbe] = UInt64(layout == 2 ? indexCount : slotCount)
        words[Word.minValidity] = 300_000_000_000
        words[Word.servingFloor] = 10_000_000_000
        words[Word.idleTimeout] = 600_000_000_000
        let kind = Array("vehicle".utf8)
        words[Word.kindLength] = UInt64(kind.count)
        for (offset, byte) in kind.enumerated() { words[Word.kind + offset / 8] |= UInt64(byte) << (8 * (offset % 8)) }
        if layout == 2 { words[Word.indexCount] = UInt64(indexCount) }
    }

    /// Header word `index` (byte offset / 8), for a test to change.
    subscript(header index: Int) -> UInt64 {
        get { words[index] }
        set { words[index] = newValue }
    }

    /// `id`'s SipHash-2-4 under the segment's key.
    func hash(_ id: String) -> UInt64 {
        Array(id.utf8).withUnsafeBytes { SipHash24.hash($0, k0: k0, k1: k1) }
    }

    /// Where `id`'s probe starts: the high 64 bits of its hash times the index entries (layout 2)
    /// or the slots (layout 1).
    func home(_ id: String) -> Int {
        Int(hash(id).multipliedFullWidth(by: UInt64(layout == 2 ? indexCount : slotCount)).high)
    }

    /// The entry or slot `steps` after `id`'s home, wrapping to 0.
    func position(_ id: String, after steps: Int) -> Int {
        (home(id) + steps) % (layout == 2 ? indexCount : slotCount)
    }

    /// Index entry `position` (layout 2).
    subscript(entry position: Int) -> UInt64 {
        get { words[Self.headerSize / 8 + position] }
        set { words[Self.headerSize / 8 + position] = newValue }
    }

    /// The index entry that names `slotPlusOne - 1` as `id`'s slot: the high 32 bits of its hash,
    /// and the slot number plus 1 (0xFFFFFFFF: removed).
    func entry(for id: String, slotPlusOne: UInt64) -> UInt64 {
        hash(id) & 0xFFFF_FFFF_0000_0000 | slotPlusOne
    }

    /// The index entry that names `slot` as `id`'s slot.
    func entry(for id: String, slot: Int) -> UInt64 { entry(for: id, slotPlusOne: UInt64(slot) + 1) }

    /// Writes slot `slot` whole, as the writer leaves it after a write (an even sequence): `id`'s
    /// `token` in `state` (1: live), with `hash` (the id's own unless given) and a token expiring in
    /// `validity` seconds of an hour's lifetime.
    mutating func putSlot(
        _ slot: Int,
        id: String,
        token: String,
        state: UInt64 = 1,
        hash: UInt64? = nil,
        validity: UInt64 = 3600
    ) {
        let base = (tableOffset + slot * slotSize) / 8
        let idBytes = Array(id.utf8)
        let tokenBytes = Array(token.utf8)
        words[base] = 2
        words[base + 1] = state | UInt64(idBytes.count) << 16 | UInt64(tokenBytes.count) << 32
        words[base + 2] = hash ?? self.hash(id)
        words[base + 3] = fsm_boottime_ns() + validity * 1_000_000_000
        words[base + 4] = Self.hourNanoseconds
        words[base + 5] = UInt64(bitPattern: Int64(Date().timeIntervalSince1970) + Int64(validity))
        let data = idBytes + [UInt8](repeating: 0, count: (8 - idBytes.count % 8) % 8) + tokenBytes
        for (offset, byte) in data.enumerated() { words[base + 6 + offset / 8] |= UInt64(byte) << (8 * (offset % 8)) }
    }

    /// A memory file holding the segment, sealed as the agent seals its own (against writing,
    /// growing and shrinking). The caller closes it.
    func sealed() throws -> Int32 {
        let fd = fsm_memfd_create("ftd-segment-image")
        guard fd >= 0 else { throw AgentError("memfd_create: \(String(cString: strerror(errno)))") }
        let bytes = words.map(\.littleEndian)
        guard ftruncate(fd, off_t(size)) == 0,
            bytes.withUnsafeBytes({ pwrite(fd, $0.baseAddress, $0.count, 0) }) == size,
            fsm_seal_read_only(fd) == 0
        else {
            close(fd)
            throw AgentError("writing the segment image: \(String(cString: strerror(errno)))")
        }
        return fd
    }

    /// The `SHM` reply that hands `descriptor` out as this segment, announced as `layout` (its
    /// own unless given).
    func reply(_ descriptor: Int32, announcing announced: Int? = nil) -> HostileAgent.Answer {
        .line("OK size=\(size) layout=\(announced ?? layout) generation=7", descriptors: [descriptor])
    }
}
