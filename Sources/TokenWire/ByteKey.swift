#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A kind and an id compared and hashed by their UTF-8 bytes, as the agent, its providers and
/// Fleet Engine see them: the client's `TokenSubject` and the agent's `TokenKey` are both such a
/// key. `String`'s own `==` treats canonically equivalent texts as equal (a precomposed `é` and
/// `e` with a combining accent), which would let one id's token answer the other.
public enum ByteKey {
    /// Whether one key (`kind`, `id`) and another (`otherKind`, `otherID`) have the same bytes.
    @inlinable @inline(__always)
    public static func equal(kind: String, id: String, _ otherKind: String, _ otherID: String) -> Bool {
        sameBytes(id, otherID) && sameBytes(kind, otherKind)
    }

    /// Hashes `kind`'s and `id`'s bytes, a byte that is never in UTF-8 between them.
    @inlinable
    public static func hash(kind: String, id: String, into hasher: inout Hasher) {
        combineBytes(of: kind, into: &hasher)
        hasher.combine(0xFF as UInt8)  // never in UTF-8: ends the kind
        combineBytes(of: id, into: &hasher)
    }

    @inlinable
    static func combineBytes(of text: String, into hasher: inout Hasher) {
        let done: Void? = text.utf8.withContiguousStorageIfAvailable {
            hasher.combine(bytes: UnsafeRawBufferPointer($0))
        }
        if done == nil {
            for byte in text.utf8 { hasher.combine(byte) }
        }
    }

    /// Whether `a` and `b` have the same UTF-8 bytes.
    @inlinable @inline(__always)
    public static func sameBytes(_ a: String, _ b: String) -> Bool {
        // The same value holds the same bytes: ids and kinds under 16 bytes, most of them, are
        // answered here with nothing read or called.
        if a.isSameValue(as: b) { return true }
        let compared = a.utf8.withContiguousStorageIfAvailable { left in
            b.utf8.withContiguousStorageIfAvailable { right in
                left.count == right.count
                    && (left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0)
            }
        }
        if let compared, let compared { return compared }
        return a.utf8.elementsEqual(b.utf8)
    }
}

extension String {
    /// Whether `self` and `other` are the same string value: their 16 bytes alike, which for a
    /// string of up to 15 UTF-8 bytes is its content and for a longer one its storage (which
    /// two live values that share it cannot change). A few instructions; `false` says nothing
    /// (compare the bytes, or use `==`).
    @inlinable
    public func isSameValue(as other: String) -> Bool {
        withUnsafeBytes(of: self) { left in
            withUnsafeBytes(of: other) { right in
                left.load(as: (UInt64, UInt64).self) == right.load(as: (UInt64, UInt64).self)
            }
        }
    }
}
