/// The kinds of OAuth 2.0 access tokens (the config's `access_tokens`): on the wire one kind,
/// `access`, whose id is the entry's name (`GET access fleet-admin`); inside the agent and the
/// client each entry is a kind of its own, `access:<name>`, so that everything kept per kind
/// (access rules, the shared-memory segment, the signature budget, the fetch lane, STATS and
/// metrics) is kept per entry.
///
/// A `:` is never in a kind a request or the configuration can name (1 to 32 of `a-z`, `0-9` and
/// `-`), so an entry's kind can never be taken for another kind's, and the wire form is the only
/// way to ask for it. ``RequestParser`` turns `access <name>` into the entry's kind with the name as
/// its id; ``WireRequest/line`` writes it back.
public enum AccessTokenKind {
    /// The kind requests name: `GET access <name>`.
    public static let wireKind = "access"
    /// What an entry's kind starts with.
    public static let prefix = "access:"
    /// The longest entry name, bytes: `access:` and the name fit the 32 bytes a shared-memory
    /// segment has for its kind.
    public static let maxNameBytes = WireLimits.maxKindBytes - 7
    /// The least time an access token must have left to be served, seconds: Google's client
    /// libraries treat a token within 3 min 45 s of its expiry as expired and fetch another on
    /// every call, so one served with less would make them ask on every call.
    public static let servingFloor: Double = 300
    /// The longest access token served, bytes: `REFRESH access <name> <token>` still fits the
    /// 4096-byte request line.
    public static let maxTokenBytes = 4000

    /// The kind of the entry `name`: `access:<name>`.
    public static func kind(name: some StringProtocol) -> String { prefix + name }

    /// Whether `kind` is an entry's kind (`access:<name>`).
    @inlinable
    public static func isAccessKind(_ kind: some StringProtocol) -> Bool {
        kind.utf8.count > 7 && kind.utf8.starts(with: prefix.utf8)
    }

    /// The entry name of `kind`, when it is an entry's kind.
    @inlinable
    public static func name(ofKind kind: some StringProtocol) -> Substring? {
        guard isAccessKind(kind) else { return nil }
        return Substring(kind).dropFirst(prefix.utf8.count)
    }

    /// Whether `name` is a well-formed entry name: 1 to ``maxNameBytes`` bytes of `a-z`, `0-9` and
    /// `-`.
    public static func isWellFormedName(_ name: some StringProtocol) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= maxNameBytes else { return false }
        return utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }

    /// The bad-kind text for a malformed entry name.
    public static let nameRule = "access token name must be 1 to \(maxNameBytes) of a-z, 0-9 and -"

    /// Why `id` cannot be asked for under the entry kind `kind`, or `nil`: its one id is its name.
    @inlinable
    public static func keyProblem(kind: some StringProtocol, id: some Collection<UInt8>) -> String? {
        guard let name = name(ofKind: kind) else { return nil }
        return name.utf8.elementsEqual(id) ? nil : "access token \(name) has one id: its name"
    }

    /// The kind and id as a request writes them: `access` and the name for an entry's kind, the
    /// kind and id themselves for any other.
    public static func wireFields(kind: String, id: String) -> (kind: String, id: String) {
        guard let name = name(ofKind: kind) else { return (kind, id) }
        return (wireKind, String(name))
    }
}
