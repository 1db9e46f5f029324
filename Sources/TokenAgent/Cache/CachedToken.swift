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

/// The byte format of a cache snapshot: a `fleet-tokend-cache v1` line, then one
/// `kind TAB id TAB expires-at TAB token` line per token. Kinds, ids and tokens hold no tabs or
/// line breaks (the wire rules forbid them), so the format needs no escaping.
public enum CacheSnapshot {
    /// The first line.
    public static let header = "fleet-tokend-cache v1"

    /// Encodes `tokens`.
    public static func encode(_ tokens: [CachedToken]) -> [UInt8] {
        var text = header + "\n"
        for token in tokens { text += "\(token.kind)\t\(token.id)\t\(token.expiresAt)\t\(token.token)\n" }
        return Array(text.utf8)
    }

    /// Decodes a snapshot; malformed lines are skipped, an unknown header gives nothing.
    public static func decode(_ bytes: [UInt8]) -> [CachedToken] {
        guard let text = String(validating: bytes, as: UTF8.self) else { return [] }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: true)[...]
        guard lines.first == Substring(header) else { return [] }
        lines = lines.dropFirst()
        return lines.compactMap { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            guard fields.count == 4, !fields[0].isEmpty, !fields[1].isEmpty, !fields[3].isEmpty,
                let expiresAt = Int64(fields[2])
            else { return nil }
            return CachedToken(
                kind: String(fields[0]),
                id: String(fields[1]),
                token: String(fields[3]),
                expiresAt: expiresAt
            )
        }
    }
}
