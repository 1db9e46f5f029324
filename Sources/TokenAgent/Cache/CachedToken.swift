/// A cached token as handed from one agent process to the next (systemd's file-descriptor store).
public struct CachedToken: Sendable, Hashable {
    /// The kind.
    public var kind: String
    /// The id.
    public var id: String
    /// The token text.
    public var token: String
    /// Its expiry, Unix seconds.
    public var expiresAt: Int64

    /// Creates a cached token.
    public init(kind: String, id: String, token: String, expiresAt: Int64) {
        self.kind = kind
        self.id = id
        self.token = token
        self.expiresAt = expiresAt
    }
}

/// The byte format of a cache snapshot: a `fleet-tokend-cache v2` line; one
/// `#provider TAB kind TAB digest` line per kind, naming the provider the kind's tokens came from
/// (``ProviderSet/Built/digests``); then one `kind TAB id TAB expires-at TAB token` line per token.
/// Kinds, ids and tokens hold no tabs or line breaks (the wire rules forbid them), and no kind
/// starts with `#`, so the format needs no escaping.
///
/// The next process takes a kind's tokens only when that kind's provider is the same as the one
/// that made them, as a reload keeps them: a token from another provider, or accepted under other
/// rules (`claim`, `accept_wildcard`, `max_lifetime`, or an older agent's, whose snapshots are
/// `v1`), is fetched again instead.
public enum CacheSnapshot {
    /// The first line.
    public static let header = "fleet-tokend-cache v2"

    /// What a snapshot holds.
    public struct Contents: Sendable, Equatable {
        /// The digest of each kind's provider.
        public var providers: [String: String]
        /// The tokens.
        public var tokens: [CachedToken]
    }

    /// Encodes `tokens`, made by the providers whose digests `providers` gives by kind.
    public static func encode(_ tokens: [CachedToken], providers: [String: String] = [:]) -> [UInt8] {
        var text = header + "\n"
        for (kind, digest) in providers.sorted(by: { $0.key < $1.key }) { text += "#provider\t\(kind)\t\(digest)\n" }
        for token in tokens { text += "\(token.kind)\t\(token.id)\t\(token.expiresAt)\t\(token.token)\n" }
        return Array(text.utf8)
    }

    /// The tokens of a snapshot (``contents(of:)``).
    public static func decode(_ bytes: [UInt8]) -> [CachedToken] { contents(of: bytes).tokens }

    /// Decodes a snapshot; malformed lines are skipped, an unknown header gives nothing.
    ///
    /// It works on the bytes (one pass for the line ends and tabs, a `String` per field), since a
    /// hand-over of 100,000 tokens is tens of megabytes that a restart waits for.
    public static func contents(of bytes: [UInt8]) -> Contents {
        bytes.withUnsafeBufferPointer { decode($0) }
    }

    private static func decode(_ bytes: UnsafeBufferPointer<UInt8>) -> Contents {
        var contents = Contents(providers: [:], tokens: [])
        let headerBytes = Array(header.utf8)
        guard bytes.count > headerBytes.count, bytes[headerBytes.count] == 0x0A,
            bytes[..<headerBytes.count].elementsEqual(headerBytes)
        else { return contents }
        var start = headerBytes.count + 1
        while start < bytes.count {
            var end = start
            while end < bytes.count, bytes[end] != 0x0A { end += 1 }
            let line = UnsafeBufferPointer(rebasing: bytes[start..<end])
            if line.first == UInt8(ascii: "#") {
                if let (kind, digest) = decodeProvider(line) { contents.providers[kind] = digest }
            } else if let token = decodeLine(line) {
                contents.tokens.append(token)
            }
            start = end + 1
        }
        return contents
    }

    /// One `#provider TAB kind TAB digest` line, or `nil` when it is malformed.
    private static func decodeProvider(_ line: UnsafeBufferPointer<UInt8>) -> (String, String)? {
        let fields = line.split(separator: 0x09, omittingEmptySubsequences: false)
        guard fields.count == 3, fields[0].elementsEqual("#provider".utf8), !fields[1].isEmpty, !fields[2].isEmpty,
            let kind = String(validating: fields[1], as: UTF8.self),
            let digest = String(validating: fields[2], as: UTF8.self)
        else { return nil }
        return (kind, digest)
    }

    /// One `kind TAB id TAB expires-at TAB token` line, or `nil` when it is malformed.
    private static func decodeLine(_ line: UnsafeBufferPointer<UInt8>) -> CachedToken? {
        var tabs: [Int] = []
        for index in line.indices where line[index] == 0x09 {
            tabs.append(index)
            if tabs.count > 3 { return nil }
        }
        guard tabs.count == 3 else { return nil }
        let kind = line[0..<tabs[0]]
        let id = line[(tabs[0] + 1)..<tabs[1]]
        let expiry = line[(tabs[1] + 1)..<tabs[2]]
        let token = line[(tabs[2] + 1)...]
        guard !kind.isEmpty, !id.isEmpty, !token.isEmpty,
            let kindText = String(validating: kind, as: UTF8.self),
            let idText = String(validating: id, as: UTF8.self),
            let tokenText = String(validating: token, as: UTF8.self),
            let expiresAt = Int64(String(decoding: expiry, as: UTF8.self))
        else { return nil }
        return CachedToken(kind: kindText, id: idText, token: tokenText, expiresAt: expiresAt)
    }
}
