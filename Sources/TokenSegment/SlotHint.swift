import CSharedMemory

/// Where a segment writer last found an id: the slot's address in the writer's mapping and how
/// many cache lines its header, id and token span, packed in one word so the agent's store can
/// keep it beside the entry. Only a hint: the writer serves from it only when the address is a
/// slot of its own mapping that is live and holds the id, so a stale hint costs a probe and is
/// never wrong. The address lets the store start loading the slot (``prefetch()``) before it
/// has decided to serve, so the token's lines arrive together, and while the store works.
public struct SlotHint: Sendable, Equatable {
    /// The slot's address (the low 48 bits, where Linux places user-space mappings on x86-64 and
    /// arm64 unless a program asks for higher ones; a slot above them would never match its hint,
    /// and be found by its hash every time), then the slot's cache lines in use (the high 16);
    /// zero when no slot is known.
    public var word: UInt64

    /// No slot known.
    public static let none = SlotHint(word: 0)

    public init(word: UInt64) { self.word = word }

    /// The hint for the slot at `address` whose header, id and token take `bytes` bytes.
    init(address: UnsafeRawPointer, bytes: Int) {
        let lines = UInt64(min(0xffff, (bytes + 63) / 64))
        word = UInt64(UInt(bitPattern: address)) & Self.addressMask | lines << 48
    }

    private static let addressMask: UInt64 = (1 << 48) - 1

    /// The address hinted at (0: none).
    var address: UInt { UInt(word & Self.addressMask) }

    /// Asks the processor to start loading the hinted slot's lines. Harmless for any word: a
    /// prefetch never faults.
    @inline(__always)
    public func prefetch() {
        guard let start = UnsafeRawPointer(bitPattern: address) else { return }
        prefetchCacheLines(start, length: min(Self.mostPrefetched, Int(word >> 48) * 64))
    }

    /// The most bytes ``prefetch()`` asks for, whatever the word says.
    static let mostPrefetched = 4096
}

/// Starts loading the cache lines that hold `length` bytes from `start` (a hint: it never
/// faults and changes nothing). For a lookup that knows where its next read is well before it
/// makes it.
public func prefetchCacheLines(_ start: UnsafeRawPointer, length: Int) {
    fsm_prefetch(start, length)
}
