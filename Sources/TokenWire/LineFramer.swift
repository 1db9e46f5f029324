#if canImport(Glibc)
    import Glibc
#endif

/// Splits a byte stream into request lines: LF-terminated, at most
/// ``WireLimits/maxRequestLineBytes`` bytes each (a CR before the LF is not counted).
///
/// The framer is pure and keeps only how far it has already searched, so a stream that arrives a
/// byte at a time is searched once. The caller owns the bytes: it passes every byte not yet
/// consumed, consumes what a ``Step/line(length:)`` names (plus the LF), and after
/// ``Step/tooLong`` discards the rest of the connection's input.
public struct LineFramer: Sendable {
    /// What the bytes seen so far hold.
    public enum Step: Sendable, Hashable {
        /// A whole line of `length` bytes (a trailing CR included), followed by its LF.
        case line(length: Int)
        /// A line over the limit: nothing after it can be framed.
        case tooLong
        /// No whole line yet; `pending` bytes of a partial line wait for more.
        case needMoreData(pending: Int)
    }

    @usableFromInline var searchedBytes = 0

    /// Creates a framer at the start of a stream.
    public init() {}

    /// Looks for the next line in `bytes`, the stream's unconsumed bytes (the same bytes as the
    /// last call's, plus what arrived since, unless a line was consumed in between). Inlinable, so
    /// it is specialised for the caller's collection (a generic call through a buffer's view
    /// would allocate for every element access).
    @inlinable
    public mutating func next<Bytes: RandomAccessCollection>(in bytes: Bytes) -> Step where Bytes.Element == UInt8 {
        let limit = WireLimits.maxRequestLineBytes
        let count = bytes.count
        // Only look at bytes not already searched, and never further than one line may reach.
        let searchEnd = bytes.index(bytes.startIndex, offsetBy: min(count, limit + 2))
        let searchStart = bytes.index(bytes.startIndex, offsetBy: min(searchedBytes, count))
        if let newline = bytes[searchStart..<searchEnd].firstIndex(of: UInt8(ascii: "\n")) {
            searchedBytes = 0
            let length = bytes.distance(from: bytes.startIndex, to: newline)
            let hasCR = length > 0 && bytes[bytes.index(before: newline)] == UInt8(ascii: "\r")
            return (hasCR ? length - 1 : length) > limit ? .tooLong : .line(length: length)
        }
        if count > limit + 1 { return .tooLong }
        searchedBytes = count
        return .needMoreData(pending: count)
    }

    /// ``next(in:)`` for bytes in memory: the LF is found with `memchr`, which scans a word or
    /// more at a time where the generic search looks at each byte.
    public mutating func next(in bytes: UnsafeRawBufferPointer) -> Step {
        let limit = WireLimits.maxRequestLineBytes
        let count = bytes.count
        let searchEnd = min(count, limit + 2)
        let searchStart = min(searchedBytes, count)
        if searchEnd > searchStart, let base = bytes.baseAddress,
            let found = memchr(base + searchStart, 0x0A, searchEnd - searchStart)
        {
            searchedBytes = 0
            let length = UnsafeRawPointer(found) - base
            let hasCR = length > 0 && bytes[length - 1] == UInt8(ascii: "\r")
            return (hasCR ? length - 1 : length) > limit ? .tooLong : .line(length: length)
        }
        if count > limit + 1 { return .tooLong }
        searchedBytes = count
        return .needMoreData(pending: count)
    }

    /// Forgets the search position (the caller consumed bytes without a line, e.g. at end of input).
    public mutating func reset() { searchedBytes = 0 }
}
