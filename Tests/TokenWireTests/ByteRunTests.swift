import Testing
import TokenWire

/// `ByteRun` against the rules written out a byte at a time: every byte value at every place of
/// lines short and long enough to take the scan through whole words, the tail read from the end of
/// the last eight bytes, and the tail copied from a line under eight bytes.
@Suite("Byte runs")
struct ByteRunTests {
    /// The scalar scan the word-at-a-time one must agree with.
    private static func scalarEnd(_ bytes: [UInt8], from start: Int, _ inside: (UInt8) -> Bool) -> Int {
        var index = start
        while index < bytes.count, inside(bytes[index]) { index += 1 }
        return index
    }

    private static func wordEnd(_ bytes: [UInt8], from start: Int, _ outside: (UInt64) -> UInt64) -> Int {
        bytes.withUnsafeBytes { ByteRun.end(of: $0, from: start, to: $0.count, outside) }
    }

    @Test func everyByteValueAtEveryPlaceEndsARunExactlyWhenTheRuleSaysSo() {
        for byte in UInt8.min...UInt8.max {
            for length in 1...19 {
                for place in 0..<length {
                    var kindLine = [UInt8](repeating: UInt8(ascii: "k"), count: length)
                    kindLine[place] = byte
                    var idLine = [UInt8](repeating: UInt8(ascii: "~"), count: length)
                    idLine[place] = byte
                    for start in Set([0, 1, place, length]) where start <= length {
                        let kind = Self.wordEnd(kindLine, from: start, ByteRun.outsideKind)
                        let kindRule = Self.scalarEnd(kindLine, from: start, TokenIdentifier.isKindByte)
                        #expect(kind == kindRule, "kind: byte \(byte) at \(place) of \(length), from \(start)")
                        let id = Self.wordEnd(idLine, from: start, ByteRun.outsideID)
                        let idRule = Self.scalarEnd(idLine, from: start, SimpleGet.isIDByte)
                        #expect(id == idRule, "id: byte \(byte) at \(place) of \(length), from \(start)")
                    }
                }
            }
        }
    }

    /// Lines of bytes drawn from the classes' edges, several outside bytes in each: the first one
    /// found, never a later one (a borrow or carry from one byte into the next would show here).
    @Test func theFirstByteOutsideIsFoundWhereverOthersFollow() {
        let edges: [UInt8] = [
            0x00, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x2C, 0x2D, 0x2E, 0x2F, 0x30, 0x39, 0x3A, 0x3F, 0x40, 0x5B, 0x5C,
            0x5D, 0x60, 0x61, 0x7A, 0x7B, 0x7E, 0x7F, 0x80, 0xA1, 0xAD, 0xE1, 0xFE, 0xFF,
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let length = Int.random(in: 1...40, using: &generator)
            let line = (0..<length).map { _ in edges.randomElement(using: &generator)! }
            let start = Int.random(in: 0...length, using: &generator)
            #expect(
                Self.wordEnd(line, from: start, ByteRun.outsideKind)
                    == Self.scalarEnd(line, from: start, TokenIdentifier.isKindByte),
                "kind \(line) from \(start)"
            )
            #expect(
                Self.wordEnd(line, from: start, ByteRun.outsideID)
                    == Self.scalarEnd(line, from: start, SimpleGet.isIDByte),
                "id \(line) from \(start)"
            )
        }
    }
}
