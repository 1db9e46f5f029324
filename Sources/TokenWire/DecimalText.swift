#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Numbers written with a fixed number of decimals, as C's `printf` writes them.
public enum DecimalText {
    /// `value` with `digits` digits after the point (`%.Nf`): rounded to nearest from the exact
    /// binary value, ties to even, so 0.25 is `0.2` and 0.35 (just above, in binary) `0.4`;
    /// `nan`, `inf` and `-inf` for those values. `digits` is clamped to 0...20.
    public static func fixed(_ value: Double, digits: Int) -> String {
        // The longest is a negative 309-digit integer part, a point and 20 digits.
        let capacity = 340
        return withUnsafeTemporaryAllocation(of: CChar.self, capacity: capacity) { buffer in
            let count = withVaList([Int32(min(max(digits, 0), 20)), value]) { arguments in
                vsnprintf(buffer.baseAddress!, capacity, "%.*f", arguments)
            }
            let length = Int(min(max(count, 0), Int32(capacity - 1)))
            return String(decoding: UnsafeRawBufferPointer(start: buffer.baseAddress!, count: length), as: UTF8.self)
        }
    }
}
