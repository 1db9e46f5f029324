import TokenSegment
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// The key of a cached entry: a configured kind and the id's bytes.
///
/// A key held by the store owns its id as a `String`; a key made for a lookup may instead borrow
/// the id's bytes straight from the request (a buffer's readable bytes), so a cache hit needs no
/// `String`. Both forms hash and compare by the id's UTF-8 bytes, so they find each other.
///
/// It is `Sendable` so it can be used under the store's locks; a borrowed key never outlives the
/// call that made it and is never stored (the store inserts only keys made from a `String` id).
struct EntryKey: LRUTableKey, @unchecked Sendable {
    /// Where the id's bytes are.
    enum ID {
        /// An id the key owns.
        case owned(String)
        /// Bytes borrowed for the duration of a lookup; never stored.
        case borrowed(UnsafeRawBufferPointer)
    }

    /// The kind: one of the configured kind names.
    var kind: String
    /// The id.
    var id: ID

    /// A key that owns its id.
    init(kind: String, id: String) {
        self.kind = kind
        self.id = .owned(id)
    }

    /// A key borrowing `id` for one lookup.
    init(kind: String, borrowing id: UnsafeRawBufferPointer) {
        self.kind = kind
        self.id = .borrowed(id)
    }

    /// The key as providers and logs know it.
    var tokenKey: TokenKey {
        switch id {
        case .owned(let text): return TokenKey(kind: kind, id: text)
        case .borrowed(let bytes): return TokenKey(kind: kind, id: String(decoding: bytes, as: UTF8.self))
        }
    }

    func withIDBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        switch id {
        case .borrowed(let bytes): return body(bytes)
        case .owned(let text):
            if let result = text.utf8.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) {
                return result
            }
            var copy = text
            return copy.withUTF8 { body(UnsafeRawBufferPointer($0)) }
        }
    }

    /// The per-process random key of ``idHash``.
    private static let idHashKey = (UInt64.random(in: .min ... .max), UInt64.random(in: .min ... .max))

    /// SipHash-1-3 of the id's bytes under a per-process random key, the kind's length mixed
    /// in: what the key hashes as. It leaves the kind's bytes out, so an id cached under two
    /// kinds hashes alike (`==` tells them apart), and costs a fraction of hashing both through
    /// `Hasher` (docs/BENCHMARKS-METHOD.md, "instructions per socket GET"). SipHash-1-3 is what
    /// `Hasher` itself computes: enough for a table whose key no peer sees.
    var idHash: UInt64 {
        let key = Self.idHashKey
        let length = UInt64(truncatingIfNeeded: kind.utf8.count)
        return withIDBytes { SipHash13.hash($0, k0: key.0, k1: key.1 ^ length) }
    }

    /// What the store's shards and tables index the key by: ``idHash``, with no `Hasher` pass.
    var tableHash: Int { Int(truncatingIfNeeded: idHash) }

    func hash(into hasher: inout Hasher) {
        hasher.combine(idHash)
    }

    // Read-only, said so, and kept a call: the store's table then compares its stored key in
    // place, neither key copied (their strings retained, then released). So its body takes no
    // closure: the ids' cases are matched where they are.
    @_effects(readonly) @inline(never)
    static func == (lhs: EntryKey, rhs: EntryKey) -> Bool {
        guard lhs.kind == rhs.kind else { return false }
        switch lhs.id {
        case .borrowed(let left):
            switch rhs.id {
            case .borrowed(let right): return sameBytes(left, right)
            case .owned(let right): return sameBytes(right, left)
            }
        case .owned(let left):
            switch rhs.id {
            case .borrowed(let right): return sameBytes(left, right)
            case .owned(let right): return ByteKey.sameBytes(left, right)
            }
        }
    }

    private static func sameBytes(_ left: UnsafeRawBufferPointer, _ right: UnsafeRawBufferPointer) -> Bool {
        left.count == right.count && (left.isEmpty || memcmp(left.baseAddress!, right.baseAddress!, left.count) == 0)
    }

    private static func sameBytes(_ text: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
        let utf8 = text.utf8
        guard utf8.count == bytes.count else { return false }
        return utf8.withContiguousStorageIfAvailable { sameBytes(UnsafeRawBufferPointer($0), bytes) }
            ?? utf8.elementsEqual(bytes)
    }
}
