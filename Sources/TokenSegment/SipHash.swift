/// SipHash-2-4 (Aumasson and Bernstein): the segment's keyed hash of ids. Ids are chosen by
/// clients; with a random key per segment, nobody can pick ids that collide on purpose.
public struct SipHash24 {
    /// Hashes `bytes` under the key (`k0`, `k1`).
    @inlinable
    public static func hash(_ bytes: UnsafeRawBufferPointer, k0: UInt64, k1: UInt64) -> UInt64 {
        SipHash.hash(bytes, k0: k0, k1: k1, compressionRounds: 2, finalizationRounds: 4)
    }
}

/// SipHash-1-3: SipHash with one round a word and three to finish, as Swift's `Hasher` and
/// Rust's `HashMap` use for tables a peer fills. For hashes that stay in the process (the
/// agent's store); the segment's, which other programs compute, is ``SipHash24``.
public struct SipHash13 {
    /// Hashes `bytes` under the key (`k0`, `k1`).
    @inlinable
    public static func hash(_ bytes: UnsafeRawBufferPointer, k0: UInt64, k1: UInt64) -> UInt64 {
        SipHash.hash(bytes, k0: k0, k1: k1, compressionRounds: 1, finalizationRounds: 3)
    }
}

/// The SipHash family's one body; each variant fixes its rounds, which inlining makes constant.
@usableFromInline
enum SipHash {
    @inlinable @inline(__always)
    static func hash(
        _ bytes: UnsafeRawBufferPointer,
        k0: UInt64,
        k1: UInt64,
        compressionRounds: Int,
        finalizationRounds: Int
    ) -> UInt64 {
        var v0: UInt64 = 0x736f_6d65_7073_6575 ^ k0
        var v1: UInt64 = 0x646f_7261_6e64_6f6d ^ k1
        var v2: UInt64 = 0x6c79_6765_6e65_7261 ^ k0
        var v3: UInt64 = 0x7465_6462_7974_6573 ^ k1
        let count = bytes.count
        let whole = count & ~7
        var offset = 0
        while offset < whole {
            let m = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            v3 ^= m
            for _ in 0..<compressionRounds { round(&v0, &v1, &v2, &v3) }
            v0 ^= m
            offset += 8
        }
        // The last 0 to 7 bytes, little-endian, in at most three loads: four, two, then one.
        var last: UInt64 = 0
        if count & 4 != 0 {
            last = UInt64(UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt32.self)))
            offset += 4
        }
        if count & 2 != 0 {
            let pair = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
            last |= UInt64(pair) << UInt64((offset - whole) * 8)
            offset += 2
        }
        if count & 1 != 0 { last |= UInt64(bytes[offset]) << UInt64((offset - whole) * 8) }
        last |= UInt64(truncatingIfNeeded: count) << 56
        v3 ^= last
        for _ in 0..<compressionRounds { round(&v0, &v1, &v2, &v3) }
        v0 ^= last
        v2 ^= 0xff
        for _ in 0..<finalizationRounds { round(&v0, &v1, &v2, &v3) }
        return v0 ^ v1 ^ v2 ^ v3
    }

    @inlinable
    static func round(_ v0: inout UInt64, _ v1: inout UInt64, _ v2: inout UInt64, _ v3: inout UInt64) {
        v0 &+= v1
        v1 = rotate(v1, 13)
        v1 ^= v0
        v0 = rotate(v0, 32)
        v2 &+= v3
        v3 = rotate(v3, 16)
        v3 ^= v2
        v0 &+= v3
        v3 = rotate(v3, 21)
        v3 ^= v0
        v2 &+= v1
        v1 = rotate(v1, 17)
        v1 ^= v2
        v2 = rotate(v2, 32)
    }

    @inlinable
    static func rotate(_ value: UInt64, _ bits: UInt64) -> UInt64 { value << bits | value >> (64 - bits) }
}
