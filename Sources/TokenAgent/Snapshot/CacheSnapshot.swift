import Crypto
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The byte format of a cache snapshot, the one the cache file and systemd's file-descriptor store
/// share (format version 3): a header of three lines of fixed length, then the body it frames.
///
/// ```
/// fleet-tokend-cache v3
/// length <the body's length in bytes, 20 decimal digits>
/// sha256 <the SHA-256 of the body, 64 lowercase hex digits>
/// #agent TAB <the writing agent's version>
/// #provider TAB <kind> TAB <digest of the kind's provider identity>      (one per kind)
/// <kind> TAB <id> TAB <expires-at, Unix seconds> TAB <token>             (one per token)
/// ```
///
/// The provider digests are ``ProviderSet/Built/digests``: the next process takes a kind's tokens
/// only when its provider is the one that made them, as a reload keeps them. Kinds, ids and tokens
/// hold no tabs or line breaks (the wire rules forbid them), and no kind starts with `#`, so the
/// body needs no escaping; a `#` line of another name is skipped, so a later agent may add some.
///
/// The format version changes only when a reader of this version could not read the body right;
/// the agent's version is recorded for the logs. An agent reads version 3 only, from the cache file
/// and the fd store alike; any other version is refused as a whole (its version named), as is a
/// file whose length or checksum is wrong. The version stays in the data so that a later agent can
/// read this one's.
/// A well-framed body is still read line by line as untrusted text: a malformed line is skipped and
/// counted, and every token in it passes the same checks as a fetched token before it is taken
/// (``SnapshotAdoption``).
public enum CacheSnapshot {
    /// The format version this agent writes.
    public static let formatVersion = 3
    /// The first line of a snapshot this agent writes.
    public static let header = "fleet-tokend-cache v3"
    /// What every snapshot's first line starts with, its version after it.
    static let magic = Array("fleet-tokend-cache v".utf8)
    /// The bytes of the three header lines.
    public static let headerBytes =
        header.utf8.count + 1 + lengthPrefix.count + lengthDigits + 1
        + checksumPrefix.count + 64 + 1
    static let lengthPrefix = Array("length ".utf8)
    static let lengthDigits = 20
    static let checksumPrefix = Array("sha256 ".utf8)
    /// The largest snapshot read or written, header included: 256 MiB. A writer leaves out the
    /// tokens that would take it past this (logged and counted), so what one agent writes the
    /// next reads.
    public static let maxBytes = 256 * 1024 * 1024

    /// What a snapshot holds.
    public struct Contents: Sendable, Equatable {
        /// Its format version: 3, the one version read.
        public var formatVersion: Int
        /// The version of the agent that wrote it, when it says (printable, at most 64 bytes).
        public var agentVersion: String?
        /// The digest of each kind's provider.
        public var providers: [String: String]
        /// The tokens, in the order written.
        public var tokens: [CachedToken]
        /// Lines that are neither a `#` line nor a well-formed token line: skipped.
        public var malformedLines: Int
        /// Lines past the most the reader asked for (``CacheSnapshot/read(_:maxTokens:)``):
        /// counted as they are found, never decoded nor held.
        public var linesPastLimit: Int

        /// Creates contents.
        public init(
            formatVersion: Int = CacheSnapshot.formatVersion,
            agentVersion: String? = nil,
            providers: [String: String],
            tokens: [CachedToken],
            malformedLines: Int = 0,
            linesPastLimit: Int = 0
        ) {
            self.formatVersion = formatVersion
            self.agentVersion = agentVersion
            self.providers = providers
            self.tokens = tokens
            self.malformedLines = malformedLines
            self.linesPastLimit = linesPastLimit
        }
    }

    /// Why a snapshot is refused as a whole; nothing of it is taken.
    public enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// The first line is not a snapshot's (empty, or another file).
        case notASnapshot
        /// A snapshot of a format version this agent does not read, older or newer (the version's
        /// text, escaped).
        case unknownFormat(String)
        /// The length or checksum line is malformed.
        case badHeader
        /// Larger than ``maxBytes``.
        case oversized(Int)
        /// Shorter than its header says: cut off.
        case truncated(expected: Int, found: Int)
        /// Longer than its header says.
        case trailingBytes(expected: Int, found: Int)
        /// The body's SHA-256 is not the one the header gives.
        case checksumMismatch

        public var description: String {
            switch self {
            case .notASnapshot: return "not a cache snapshot"
            case .unknownFormat(let version): return "format version \(version), which this agent does not read"
            case .badHeader: return "malformed length or checksum line"
            case .oversized(let bytes): return "\(bytes) bytes, over the limit of \(CacheSnapshot.maxBytes)"
            case .truncated(let expected, let found): return "truncated: \(found) of \(expected) bytes"
            case .trailingBytes(let expected, let found): return "\(found) bytes where the header says \(expected)"
            case .checksumMismatch: return "checksum mismatch"
            }
        }
    }

    /// Reads a snapshot: its header (version, length, checksum) first, then the body's lines.
    /// `maxTokens`: the most token lines decoded (the
    /// agent's `max_entries`, which is all its cache can hold); the lines past them are counted
    /// (``Contents/linesPastLimit``) and skipped without being decoded, so a file of millions of
    /// tiny lines costs a scan, never a token each in memory. `#` lines are read wherever they are.
    public static func read(
        _ bytes: [UInt8],
        maxTokens: Int = .max
    ) throws(Refusal) -> Contents {
        guard bytes.count <= maxBytes else { throw .oversized(bytes.count) }
        return try bytes.withUnsafeBufferPointer { buffer throws(Refusal) in
            try read(buffer, maxTokens: maxTokens)
        }
    }

    /// The tokens of a snapshot, or none when it is refused (tests, tools).
    public static func decode(_ bytes: [UInt8]) -> [CachedToken] {
        (try? read(bytes))?.tokens ?? []
    }

    private static func read(_ bytes: UnsafeBufferPointer<UInt8>, maxTokens: Int) throws(Refusal) -> Contents {
        guard let firstLine = bytes.prefix(64).firstIndex(of: 0x0A), firstLine > magic.count,
            bytes[..<magic.count].elementsEqual(magic)
        else { throw .notASnapshot }
        let version = bytes[magic.count..<firstLine]
        guard version.elementsEqual("3".utf8) else { throw .unknownFormat(printable(version, limit: 16)) }
        guard bytes.count >= headerBytes else { throw .truncated(expected: headerBytes, found: bytes.count) }
        var at = firstLine + 1
        guard bytes[at..<(at + lengthPrefix.count)].elementsEqual(lengthPrefix) else { throw .badHeader }
        at += lengthPrefix.count
        var declared = 0
        for digit in bytes[at..<(at + lengthDigits)] {
            guard (0x30...0x39).contains(digit), declared <= maxBytes else { throw .badHeader }
            declared = declared * 10 + Int(digit - 0x30)
        }
        at += lengthDigits
        guard bytes[at] == 0x0A, bytes[(at + 1)..<(at + 1 + checksumPrefix.count)].elementsEqual(checksumPrefix) else {
            throw .badHeader
        }
        at += 1 + checksumPrefix.count
        let checksum = bytes[at..<(at + 64)]
        guard checksum.allSatisfy(isLowercaseHex), bytes[at + 64] == 0x0A else { throw .badHeader }
        let body = UnsafeBufferPointer(rebasing: bytes[headerBytes...])
        guard declared <= maxBytes - headerBytes else { throw .oversized(headerBytes + declared) }
        guard body.count >= declared else { throw .truncated(expected: headerBytes + declared, found: bytes.count) }
        guard body.count == declared else { throw .trailingBytes(expected: headerBytes + declared, found: bytes.count) }
        guard hex(SHA256.hash(data: UnsafeRawBufferPointer(body))).utf8.elementsEqual(checksum) else {
            throw .checksumMismatch
        }
        return decodeBody(body, formatVersion: 3, maxTokens: maxTokens)
    }

    /// The body's lines: `#agent`, `#provider` and token lines; malformed ones are counted, and
    /// the lines after the first `maxTokens` that are not `#` lines are counted and skipped.
    ///
    /// It works on the bytes (`memchr` for the line ends, a `String` per field), since a
    /// snapshot of 100,000 tokens is tens of megabytes that a start waits for.
    private static func decodeBody(_ bytes: UnsafeBufferPointer<UInt8>, formatVersion: Int, maxTokens: Int)
        -> Contents
    {
        var contents = Contents(formatVersion: formatVersion, providers: [:], tokens: [])
        guard let base = bytes.baseAddress else { return contents }
        // Lines decoded as tokens, malformed ones included: the work is bounded, not just what is kept.
        var examined = 0
        var start = 0
        while start < bytes.count {
            let newline = memchr(base + start, 0x0A, bytes.count - start)
            let end = newline.map { UnsafeRawPointer(base).distance(to: UnsafeRawPointer($0)) } ?? bytes.count
            if bytes[start] == UInt8(ascii: "#") {
                let line = UnsafeBufferPointer(rebasing: bytes[start..<end])
                let fields = line.split(separator: 0x09, omittingEmptySubsequences: false)
                if fields[0].elementsEqual("#provider".utf8) {
                    if let (kind, digest) = decodeProvider(fields) {
                        contents.providers[kind] = digest
                    } else {
                        contents.malformedLines += 1
                    }
                } else if fields[0].elementsEqual("#agent".utf8), fields.count == 2, contents.agentVersion == nil {
                    contents.agentVersion = printable(fields[1], limit: 64)
                }
            } else if examined >= maxTokens {
                contents.linesPastLimit += 1
            } else {
                examined += 1
                if let token = decodeLine(UnsafeBufferPointer(rebasing: bytes[start..<end])) {
                    contents.tokens.append(token)
                } else {
                    contents.malformedLines += 1
                }
            }
            start = end + 1
        }
        return contents
    }

    /// One `#provider TAB kind TAB digest` line's fields, or `nil` when it is malformed.
    private static func decodeProvider(_ fields: [Slice<UnsafeBufferPointer<UInt8>>]) -> (String, String)? {
        guard fields.count == 3, !fields[1].isEmpty, !fields[2].isEmpty,
            let kind = String(validating: fields[1], as: UTF8.self),
            let digest = String(validating: fields[2], as: UTF8.self)
        else { return nil }
        return (kind, digest)
    }

    /// One `kind TAB id TAB expires-at TAB token` line, or `nil` when it is malformed.
    private static func decodeLine(_ line: UnsafeBufferPointer<UInt8>) -> CachedToken? {
        // The three tabs' places, without an array a line (millions of lines in a large file).
        var tabs = (0, 0, 0)
        var found = 0
        for index in line.indices where line[index] == 0x09 {
            switch found {
            case 0: tabs.0 = index
            case 1: tabs.1 = index
            case 2: tabs.2 = index
            default: return nil
            }
            found += 1
        }
        guard found == 3 else { return nil }
        let kind = line[0..<tabs.0]
        let id = line[(tabs.0 + 1)..<tabs.1]
        let expiry = line[(tabs.1 + 1)..<tabs.2]
        let token = line[(tabs.2 + 1)...]
        guard !kind.isEmpty, !id.isEmpty, !token.isEmpty, !expiry.isEmpty, expiry.count <= 19,
            expiry.allSatisfy({ (0x30...0x39).contains($0) }) || (expiry.first == 0x2D && expiry.count > 1),
            let kindText = String(validating: kind, as: UTF8.self),
            let idText = String(validating: id, as: UTF8.self),
            let tokenText = String(validating: token, as: UTF8.self),
            let expiresAt = Int64(String(decoding: expiry, as: UTF8.self))
        else { return nil }
        return CachedToken(kind: kindText, id: idText, token: tokenText, expiresAt: expiresAt)
    }

    private static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (0x30...0x39).contains(byte) || (0x61...0x66).contains(byte)
    }

    /// `bytes` as text for a log: printable ASCII kept, anything else `?`, at most `limit` bytes.
    static func printable(_ bytes: some Collection<UInt8>, limit: Int) -> String {
        String(decoding: bytes.prefix(limit).map { $0 > 0x20 && $0 < 0x7F ? $0 : UInt8(ascii: "?") }, as: UTF8.self)
    }

    /// Lowercase hex digits of `bytes`.
    static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}

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
