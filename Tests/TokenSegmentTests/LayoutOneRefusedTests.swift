import CSharedMemory
import Testing
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// Layout 1, which no release writes and this one no longer reads: a segment of it, written here
/// word by word as its header was (no index; slots from byte 256), sealed like the agent's, is
/// refused by ``SegmentReader`` with a reason that names the layout, never read.
@Suite("Token segment: layout 1 refused")
struct LayoutOneRefusedTests {
    @Test func aLayoutOneSegmentIsRefusedNamingItsLayout() throws {
        let size = SegmentLayout.headerSize + 8 * 256
        let descriptor = fsm_memfd_create("layout-one")
        try #require(descriptor >= 0 && ftruncate(descriptor, off_t(size)) == 0)
        defer { close(descriptor) }
        let base = try #require(mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0))
        defer { munmap(base, size) }
        func set(_ word: Int, _ value: UInt64) {
            base.storeBytes(of: value.littleEndian, toByteOffset: word * 8, as: UInt64.self)
        }
        typealias H = SegmentLayout.Header
        set(H.magic, SegmentLayout.magic)
        set(H.versionAndHeaderSize, 1 | UInt64(SegmentLayout.headerSize) << 32)
        set(H.generation, 7)
        set(H.heartbeat, fsm_boottime_ns())
        set(H.slotCountAndSize, SegmentLayout.slotsWord(count: 8, size: 256))
        set(H.tableOffset, UInt64(SegmentLayout.headerSize))
        set(H.segmentSize, UInt64(size))
        set(H.maxProbe, 1)
        set(H.kindLength, 7)
        for (index, byte) in "vehicle".utf8.enumerated() {
            base.storeBytes(of: byte, toByteOffset: H.kindBytes * 8 + index, as: UInt8.self)
        }
        try #require(fsm_seal_read_only(descriptor) == 0)
        let readOnly = fsm_reopen_read_only(descriptor)
        defer { close(readOnly) }
        let error = #expect(throws: SegmentError.self) {
            try SegmentReader(descriptor: readOnly, expectedSize: size, kind: "vehicle")
        }
        #expect(error?.description.contains("layout version 1, not 2") == true, "\(String(describing: error))")
    }
}
