import Crypto
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

extension CacheSnapshot {
    /// A snapshot ready to write: its header and body apart, so that neither is copied into the
    /// other (a snapshot of 100,000 tokens is tens of megabytes). A snapshot built a piece at a
    /// time (``Builder/drain(_:)``) holds only the body's last piece.
    public struct Encoded: Sendable {
        /// The three header lines (``CacheSnapshot/headerBytes``).
        public var header: [UInt8]
        /// The body the header frames, or its part not drained.
        public var body: [UInt8]
        /// The length of the whole body, in bytes.
        public var bodyLength: Int
        /// The tokens in the body.
        public var tokenCount: Int
        /// Tokens left out: over ``CacheSnapshot/maxBytes``, or a field the format cannot hold.
        public var leftOut: Int

        /// The snapshot's size in bytes.
        public var byteCount: Int { header.count + bodyLength }

        /// Header and body in one array (tests, small snapshots): a snapshot none of whose body
        /// was drained.
        public var bytes: [UInt8] {
            precondition(body.count == bodyLength, "a drained snapshot's body is not all here")
            return header + body
        }
    }

    /// Builds a snapshot's body token by token, then frames it with ``finish()``: the agent feeds
    /// it the cache in small chunks, each encoded straight from the store under a shard's lock.
    /// A writer may take the body a piece at a time as it grows (``drain(_:)``), so a snapshot of
    /// tens of megabytes never sits whole in memory.
    public struct Builder: Sendable {
        /// The body's bytes not drained yet.
        private var body: [UInt8] = []
        /// The bytes drained before `body`.
        private var drained = 0
        /// The checksum of the bytes drained and of `body[..<hashed]` (``checksumAppended()``).
        private var hasher = SHA256()
        private var hashed = 0
        private var tokenCount = 0
        private var leftOut = 0
        private let limit: Int

        /// Starts a body with the writing agent's version and the digest of each kind's provider.
        /// `limit` bounds the whole snapshot (tests make it small).
        /// `expectedBytes`, when known (the last snapshot's size), is reserved up front, so the
        /// body is not copied as it grows: a doubling array would hold up to three times its bytes.
        public init(
            providers: [String: String],
            agentVersion: String = FleetTokendVersion.version,
            limit: Int = CacheSnapshot.maxBytes,
            expectedBytes: Int = 0
        ) {
            self.limit = limit - CacheSnapshot.headerBytes
            body.reserveCapacity(min(max(64 * 1024, expectedBytes), self.limit))
            append(line: ["#agent", agentVersion])
            for (kind, digest) in providers.sorted(by: { $0.key < $1.key }) where Self.fits(kind) && Self.fits(digest) {
                append(line: ["#provider", kind, digest])
            }
        }

        /// Adds `token`, unless a field is one the format cannot hold (empty, a tab or a line
        /// break in it, a kind starting with `#`) or the snapshot would pass its limit: then it is
        /// counted as left out.
        public mutating func append(_ token: CachedToken) {
            var text = token.token
            text.withUTF8 { append(kind: token.kind, id: token.id, expiresAt: token.expiresAt, token: .init($0)) }
        }

        /// Adds the token whose bytes are `token`, of `kind` and `id`, expiring at `expiresAt`
        /// (Unix seconds), as ``append(_:)`` does: the bytes are copied into the body.
        public mutating func append(kind: String, id: String, expiresAt: Int64, token: UnsafeRawBufferPointer) {
            guard Self.fits(kind), kind.utf8.first != UInt8(ascii: "#"), Self.fits(id), Self.fits(token) else {
                leftOut += 1
                return
            }
            let expiry = String(expiresAt)
            let size = kind.utf8.count + id.utf8.count + expiry.utf8.count + token.count + 4
            guard drained + body.count + size <= limit else {
                leftOut += 1
                return
            }
            body.append(contentsOf: kind.utf8)
            body.append(0x09)
            body.append(contentsOf: id.utf8)
            body.append(0x09)
            body.append(contentsOf: expiry.utf8)
            body.append(0x09)
            body.append(contentsOf: token)
            body.append(0x0A)
            tokenCount += 1
        }

        /// Makes room for `count` more tokens of the longest a request and a provider allow, at
        /// once, up to the limit: the agent calls it before taking a shard's lock for a chunk, so
        /// the body does not grow (a copy of tens of megabytes) while the lock is held.
        public mutating func makeRoom(forTokens count: Int) {
            let longest = WireLimits.maxKindBytes + 4 * WireLimits.maxIDScalars + 20 + TokenAcceptance.maxTokenBytes + 4
            let needed = min(body.count + count * longest, limit - drained)
            guard body.capacity < needed else { return }
            body.reserveCapacity(min(max(needed, body.count + body.count / 4), limit - drained))
        }

        /// The bytes appended since the last ``drain(_:)``.
        public var pendingBytes: Int { body.count }

        /// Checksums the bytes appended since the last call and hands them to `write`, then lets
        /// them go (the buffer is kept for the next ones): a writer streams the body out this way
        /// and frames it with ``finish()`` at the end, whose ``Encoded/body`` is then what was
        /// appended after the last drain.
        public mutating func drain(_ write: (UnsafeRawBufferPointer) -> Void) {
            checksumAppended()
            body.withUnsafeBytes { write($0) }
            drained += body.count
            body.removeAll(keepingCapacity: true)
            hashed = 0
        }

        /// Adds each of `tokens`.
        public mutating func append(contentsOf tokens: [CachedToken]) {
            for token in tokens { append(token) }
        }

        /// The header for the body built so far, and the body (its part not drained).
        public func finish() -> Encoded {
            var encoded = CacheSnapshot.frame(body, after: drained, hasher: hasher, from: hashed)
            encoded.tokenCount = tokenCount
            encoded.leftOut = leftOut
            return encoded
        }

        /// Takes the bytes appended since the last call into the checksum now, while they are in
        /// the processor's cache: the agent calls it after each chunk of tokens, so the body is not
        /// read again, whole, to checksum it (tens of megabytes through the cache the socket loop
        /// shares, ``finish()`` then takes only what is left).
        public mutating func checksumAppended() {
            let end = body.count
            guard hashed < end else { return }
            let start = hashed
            body.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[start..<end])) }
            hashed = end
        }

        private mutating func append(line fields: [String]) {
            for (index, field) in fields.enumerated() {
                if index > 0 { body.append(0x09) }
                body.append(contentsOf: field.utf8)
            }
            body.append(0x0A)
        }

        /// Whether `field` can be a field: not empty, and without a tab or line break.
        /// (`memchr`, vectorized: the builder runs at the agent's priority, and a snapshot's
        /// tokens are tens of megabytes.)
        private static func fits(_ field: String) -> Bool {
            var field = field
            return field.withUTF8 { fits(UnsafeRawBufferPointer($0)) }
        }

        private static func fits(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard let start = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(start, 0x09, bytes.count) == nil && memchr(start, 0x0A, bytes.count) == nil
                && memchr(start, 0x0D, bytes.count) == nil
        }
    }

    /// `body` framed by the three header lines (its length and SHA-256), whatever it holds: what
    /// ``Builder/finish()`` does, and what the fuzzer and the tests use to get arbitrary bodies
    /// past the framing to the line reader.
    public static func frame(_ body: [UInt8]) -> Encoded {
        frame(body, after: 0, hasher: SHA256(), from: 0)
    }

    /// ``frame(_:)`` for a body whose first `drained` bytes went out before `body`, with `hasher`
    /// holding the checksum of those and of `body[..<offset]` already.
    static func frame(_ body: [UInt8], after drained: Int, hasher: SHA256, from offset: Int) -> Encoded {
        var hasher = hasher
        if offset < body.count {
            body.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[offset...])) }
        }
        var header = Array((CacheSnapshot.header + "\n").utf8)
        header += CacheSnapshot.lengthPrefix
        let length = String(drained + body.count)
        header += Array(repeating: UInt8(ascii: "0"), count: CacheSnapshot.lengthDigits - length.utf8.count)
        header += Array(length.utf8) + [0x0A]
        header += CacheSnapshot.checksumPrefix
        header += Array(CacheSnapshot.hex(hasher.finalize()).utf8) + [0x0A]
        return Encoded(header: header, body: body, bodyLength: drained + body.count, tokenCount: 0, leftOut: 0)
    }

    /// Encodes `tokens`, made by the providers whose digests `providers` gives by kind, as one
    /// array (tests, and snapshots small enough to copy).
    public static func encode(_ tokens: [CachedToken], providers: [String: String] = [:]) -> [UInt8] {
        var builder = Builder(providers: providers)
        builder.append(contentsOf: tokens)
        return builder.finish().bytes
    }
}
