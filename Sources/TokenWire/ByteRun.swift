/// Where a run of bytes of one class ends, found eight bytes at a time: each byte of a word is
/// tested at once, with no branch a byte (SWAR, "SIMD within a register"). ``SimpleGet`` finds
/// the end of a request's kind and of its id with it.
///
/// A class is given as a function from a little-endian word of eight bytes to a mask with the high
/// bit of each byte outside the class set and every other bit clear. Every test here is exact in
/// each byte (no carry or borrow crosses from one byte into the next), so the lowest set bit is
/// the first byte outside.
public enum ByteRun {
    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highBits: UInt64 = 0x8080_8080_8080_8080
    private static let lowBits: UInt64 = 0x7F7F_7F7F_7F7F_7F7F

    /// The index of the first byte of `bytes[start..<end]` outside the class `outside` describes,
    /// or `end` when every byte is in it. The class must leave out the zero byte.
    @inline(__always)
    public static func end(
        of bytes: UnsafeRawBufferPointer,
        from start: Int,
        to end: Int,
        _ outside: (UInt64) -> UInt64
    ) -> Int {
        var index = start
        while end - index >= 8 {
            let found = outside(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)))
            if found != 0 { return index + found.trailingZeroBitCount / 8 }
            index += 8
        }
        let left = end - index
        if left == 0 { return end }
        // The last 1 to 7 bytes, as the low bytes of a word whose high bytes are zero: read as the
        // end of the last eight bytes when the buffer has eight, else copied. A zero byte is
        // outside the class, so the scan stops at `end` at the latest.
        var word: UInt64 = 0
        if end >= 8 {
            word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: end - 8, as: UInt64.self))
            word >>= UInt64(8 - left) &* 8
        } else {
            withUnsafeMutableBytes(of: &word) {
                $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[index..<end]))
            }
            word = UInt64(littleEndian: word)
        }
        return index + min(left, outside(word).trailingZeroBitCount / 8)
    }

    /// The bytes of `word` outside a kind's class (``TokenIdentifier/isKindByte(_:)``): `a-z`,
    /// `0-9` and `-`.
    @inline(__always)
    public static func outsideKind(_ word: UInt64) -> UInt64 {
        let low = word & lowBits
        let letter = atLeast(low, 0x61) & ~atLeast(low, 0x7B)
        let digit = atLeast(low, 0x30) & ~atLeast(low, 0x3A)
        let inside = (letter | digit | equal(low, 0x2D)) & ~word
        return ~inside & highBits
    }

    /// The bytes of `word` outside an id's class (``SimpleGet/isIDByte(_:)``): the printable
    /// ASCII bytes from `!` to `~` but `/`, `:`, `\`, `?` and `#`.
    @inline(__always)
    public static func outsideID(_ word: UInt64) -> UInt64 {
        let low = word & lowBits
        let printable = atLeast(low, 0x21) & ~atLeast(low, 0x7F)
        let refused =
            equal(low, 0x23) | equal(low, 0x2F) | equal(low, 0x3A) | equal(low, 0x3F) | equal(low, 0x5C)
        let inside = printable & ~refused & ~word
        return ~inside & highBits
    }

    /// The high bit of each byte of `low` (every byte below 0x80) that is at least `value`: the
    /// byte with its high bit set, less `value`, keeps that bit exactly when it is, and never
    /// borrows from the next byte.
    @inline(__always)
    private static func atLeast(_ low: UInt64, _ value: UInt8) -> UInt64 {
        ((low | highBits) &- ones &* UInt64(value)) & highBits
    }

    /// The high bit of each byte of `low` (every byte below 0x80) equal to `value` (below 0x80):
    /// the bytes' difference plus 0x7F reaches the high bit exactly when it is not zero.
    @inline(__always)
    private static func equal(_ low: UInt64, _ value: UInt8) -> UInt64 {
        ~((low ^ (ones &* UInt64(value))) &+ lowBits) & highBits
    }
}
