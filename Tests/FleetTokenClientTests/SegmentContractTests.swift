import CTokenSegment
import Testing
import TokenSegment

/// The segment's one contract, fleet_tokend_segment.h, and what the Swift side keeps apart from it:
/// the Swift layout is the header's. (The token bounds C readers take from the header,
/// ``WireToken`` reads from it too.)
@Suite("The segment contract")
struct SegmentContractTests {
    @Test func theSwiftLayoutIsTheHeaders() {
        #expect(SegmentLayout.magic == 0x3130_4D48_534B_5446, "the bytes FTKSHM01")
        #expect(SegmentLayout.version == 2)
        #expect(SegmentLayout.headerSize == 256)
        #expect(SegmentLayout.versionWord == 2 | 256 << 32)
        #expect(SegmentLayout.tableOffset(indexCount: 16) == 384)
        #expect(SegmentLayout.Index.maxCount == (1 << 31) - 1)
        #expect(SegmentReader.tornReadRetries + 1 == Int(FTS_COPY_ATTEMPTS))
        let meta = SegmentLayout.meta(state: SegmentLayout.State.live, idLength: 5, tokenLength: 700)
        #expect(SegmentLayout.parts(ofMeta: meta) == (1, 5, 700))
        #expect(SegmentLayout.parts(ofSlots: SegmentLayout.slotsWord(count: 9, size: 512)) == (9, 512))
    }
}
