/// A cheap, unkeyed hash of a subject, for the client's own direct-mapped read cache.
///
/// Not the segment's keyed hash: the cache has no chains to flood, so ids chosen to collide only
/// evict each other, and the lookup that follows compares the whole subject. The id's bytes are
/// read a word at a time (the last word overlapping the one before it, as wyhash does); the kind,
/// one of a handful, adds only its length (kinds of one length share places: an id read as two
/// such kinds evicts itself, which costs a copy, not correctness).
enum CacheHash {
    private static let multiplier: UInt64 = 0x9E37_79B9_7F4A_7C15

    /// The hash of `subject`'s kind and id.
    @inline(__always)
    static func of(_ subject: TokenSubject) -> UInt64 {
        let seed = UInt64(truncatingIfNeeded: subject.kind.utf8.count)
        return subject.id.utf8.withContiguousStorageIfAvailable { hash(UnsafeRawBufferPointer($0), seed: seed) }
            // Strings without contiguous UTF-8 (none on Linux) take the standard library's hash.
            ?? round(seed, UInt64(bitPattern: Int64(subject.id.hashValue)))
    }

    /// `seed` mixed with `bytes`.
    @inline(__always)
    static func hash(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
        // One more round over the result: a single fold leaves short ids' low bits clustered.
        round(words(bytes, seed: seed), 0x2545_F491_4F6C_DD1D)
    }

    @inline(__always)
    private static func words(_ bytes: UnsafeRawBufferPointer, seed: UInt64) -> UInt64 {
        let count = bytes.count
        var hash = round(seed, UInt64(truncatingIfNeeded: count))
        if count >= 8 {
            var offset = 0
            while offset + 8 < count {
                hash = round(hash, bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                offset += 8
            }
            return round(hash, bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self))
        }
        if count >= 4 {
            let low = UInt64(bytes.loadUnaligned(as: UInt32.self))
            let high = UInt64(bytes.loadUnaligned(fromByteOffset: count - 4, as: UInt32.self))
            return round(hash, low | high << 32)
        }
        if count > 0 {
            let word = UInt64(bytes[0]) | UInt64(bytes[count / 2]) << 8 | UInt64(bytes[count - 1]) << 16
            return round(hash, word)
        }
        return round(hash, 0)
    }

    @inline(__always)
    private static func round(_ hash: UInt64, _ word: UInt64) -> UInt64 {
        // The full 128-bit product folded: every input bit reaches every output bit.
        let product = (hash ^ word).multipliedFullWidth(by: multiplier)
        return product.high ^ product.low
    }
}
