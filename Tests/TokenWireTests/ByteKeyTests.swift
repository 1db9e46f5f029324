import Testing
import TokenWire

/// `ByteKey` compares kinds and ids by their UTF-8 bytes, whatever form the strings take: short
/// ones held inline, longer ones in buffers of their own or shared, and texts that `String`'s own
/// `==` calls equal although their bytes differ.
@Suite("Byte keys")
struct ByteKeyTests {
    @Test func stringsAreTheSameOnlyWhenTheirBytesAre() {
        let long = String(repeating: "v", count: 40)
        let longCopy = String(decoding: Array(long.utf8), as: UTF8.self)  // a buffer of its own
        let precomposed = "v\u{E9}"
        let decomposed = "ve\u{301}"
        #expect(precomposed == decomposed)  // String's `==`: canonically equivalent
        let cases: [(String, String, Bool)] = [
            ("v-1", "v-1", true), ("v-1", "v-2", false), ("v-1", "v-1 ", false), ("", "", true), ("", "v", false),
            (long, long, true), (long, longCopy, true), (long, long + "w", false),
            (String(long.dropLast()) + "w", long, false),
            (precomposed, decomposed, false), (decomposed, decomposed, true),
        ]
        for (left, right, same) in cases {
            #expect(ByteKey.sameBytes(left, right) == same, "\(left) \(right)")
            #expect(ByteKey.sameBytes(right, left) == same, "\(right) \(left)")
            #expect(ByteKey.equal(kind: "vehicle", id: left, "vehicle", right) == same)
            #expect(!ByteKey.equal(kind: "vehicle", id: left, "trip", left))
        }
    }
}
