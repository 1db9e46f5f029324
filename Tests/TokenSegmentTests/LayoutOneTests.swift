import CSharedMemory
import Synchronization
import Testing
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// Layout 1, which the agent no longer writes, is still read: segments built here word by word
/// as docs/SHM.md's "Layout (version 1)" says, sealed like the agent's, and read by
/// ``SegmentReader``.
@Suite("Token segment: layout 1 still read")
struct LayoutOneTests {
    private let hour: UInt64 = 3_600_000_000_000
    private var now: UInt64 { fsm_boottime_ns() }

    @Test func aLayoutOneSegmentIsReadPastATombstoneAndMissesAtANeverUsedSlot() throws {
        let builder = LayoutOneSegment(slotCount: 8, slotSize: 256, seed: (11, 22))
        // Two ids placed on one probe sequence: the first slot a tombstone, then the token.
        let home = builder.home(of: "v-1")
        builder.tombstone(slot: home)
        builder.store(
            id: "v-1",
            token: "layout-one-token",
            slot: (home + 1) % 8,
            expiry: now + hour,
            unixExpiry: 1_900_000_000
        )
        builder.setMaxProbe(3)
        let reader = try builder.sealedReader()
        #expect(reader.layout == 1)
        #expect(
            reader.lookup(id: "v-1", minimumValidity: nil, now: now)
                == .hit(token: "layout-one-token", unixExpiry: 1_900_000_000)
        )
        #expect(reader.lookup(id: "v-2", minimumValidity: nil, now: now) == .miss)
        guard case .found(let copy) = reader.copy(id: "v-1") else {
            Issue.record("no copy of v-1")
            return
        }
        #expect(reader.sequence(ofSlot: copy.slot) == copy.sequence, "the fast path's slot is layout 1's")
    }

    @Test func aLayoutOneHeaderThatDoesNotAddUpIsRefused() throws {
        let builder = LayoutOneSegment(slotCount: 8, slotSize: 256, seed: (1, 2))
        builder.setWord(SegmentLayout.Header.tableOffset, 512)
        #expect(throws: SegmentError.self) { try builder.sealedReader() }
    }
}

/// A layout 1 segment written by hand into a memory file.
final class LayoutOneSegment {
    let slotCount: Int
    let slotSize: Int
    let size: Int
    let seed: (UInt64, UInt64)
    private let descriptor: Int32
    private let base: UnsafeMutableRawPointer

    init(slotCount: Int, slotSize: Int, seed: (UInt64, UInt64)) {
        self.slotCount = slotCount
        self.slotSize = slotSize
        self.seed = seed
        size = SegmentLayout.headerSize + slotCount * slotSize
        descriptor = fsm_memfd_create("layout-one")
        precondition(descriptor >= 0 && ftruncate(descriptor, off_t(size)) == 0)
        base = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0)!
        typealias H = SegmentLayout.Header
        setWord(H.magic, SegmentLayout.magic)
        setWord(H.versionAndHeaderSize, 1 | UInt64(SegmentLayout.headerSize) << 32)
        setWord(H.generation, 7)
        setWord(H.heartbeat, fsm_boottime_ns())
        setWord(H.seed0, seed.0)
        setWord(H.seed1, seed.1)
        setWord(H.slotCountAndSize, UInt64(slotCount) | UInt64(slotSize) << 32)
        setWord(H.tableOffset, UInt64(SegmentLayout.headerSize))
        setWord(H.segmentSize, UInt64(size))
        setWord(H.maxProbe, 1)
        setWord(H.minValidity, 300_000_000_000)
        setWord(H.servingFloor, 10_000_000_000)
        setWord(H.idleTimeout, 600_000_000_000)
        setWord(H.kindLength, 7)
        setBytes(Array("vehicle".utf8), at: H.kindBytes * 8)
    }

    deinit {
        munmap(base, size)
        close(descriptor)
    }

    func setWord(_ word: Int, _ value: UInt64) {
        base.storeBytes(of: value.littleEndian, toByteOffset: word * 8, as: UInt64.self)
    }

    func setMaxProbe(_ probe: UInt64) { setWord(SegmentLayout.Header.maxProbe, probe) }

    private func setBytes(_ bytes: [UInt8], at offset: Int) {
        for (index, byte) in bytes.enumerated() {
            base.storeBytes(of: byte, toByteOffset: offset + index, as: UInt8.self)
        }
    }

    private func hash(_ id: String) -> UInt64 {
        Array(id.utf8).withUnsafeBytes { SipHash24.hash($0, k0: seed.0, k1: seed.1) }
    }

    /// The home slot of `id`.
    func home(of id: String) -> Int { SegmentLayout.home(of: hash(id), slotCount: slotCount) }

    private func slotWord(_ slot: Int, _ word: Int) -> Int { (SegmentLayout.headerSize + slot * slotSize) / 8 + word }

    func tombstone(slot: Int) {
        setWord(slotWord(slot, SegmentLayout.Slot.sequence), 2)
        setWord(slotWord(slot, SegmentLayout.Slot.meta), SegmentLayout.State.tombstone)
    }

    func store(id: String, token: String, slot: Int, expiry: UInt64, unixExpiry: Int64) {
        typealias S = SegmentLayout.Slot
        let idBytes = Array(id.utf8)
        let tokenBytes = Array(token.utf8)
        setWord(slotWord(slot, S.sequence), 4)
        setWord(
            slotWord(slot, S.meta),
            SegmentLayout.meta(state: SegmentLayout.State.live, idLength: idBytes.count, tokenLength: tokenBytes.count)
        )
        setWord(slotWord(slot, S.hash), hash(id))
        setWord(slotWord(slot, S.expiry), expiry)
        setWord(slotWord(slot, S.lifetime), 3_600_000_000_000)
        setWord(slotWord(slot, S.unixExpiry), UInt64(bitPattern: unixExpiry))
        let data = slotWord(slot, S.data) * 8
        setBytes(idBytes, at: data)
        setBytes(tokenBytes, at: data + SegmentLayout.padded(idBytes.count))
    }

    /// Seals the file as the agent does and maps it as a reader does.
    func sealedReader() throws -> SegmentReader {
        precondition(fsm_seal_read_only(descriptor) == 0)
        let readOnly = fsm_reopen_read_only(descriptor)
        defer { close(readOnly) }
        return try SegmentReader(descriptor: readOnly, expectedSize: size, kind: "vehicle")
    }
}
