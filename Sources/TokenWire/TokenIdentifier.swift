/// Fleet Engine's rules for ids and the agent's rules for kind names.
public enum TokenIdentifier {
    private static let forbiddenIDScalars: Set<Unicode.Scalar> = ["/", ":", "\\", "?", "#"]

    /// Checks an id: 1 to 64 Unicode scalars, no whitespace, no control characters, none of
    /// `/ : \ ? #`, and not one of the ids with a meaning of their own (``isReserved(_:)``).
    /// Returns the reason it is invalid, or `nil` when it is valid.
    public static func problem(withID id: Substring) -> String? {
        var count = 0
        for scalar in id.unicodeScalars {
            count += 1
            if count > WireLimits.maxIDScalars { return "id longer than \(WireLimits.maxIDScalars) characters" }
            if scalar.properties.isWhitespace { return "id contains whitespace" }
            switch scalar.properties.generalCategory {
            case .control, .format, .surrogate, .privateUse, .unassigned, .lineSeparator, .paragraphSeparator:
                return "id contains a control or unassigned character"
            default: break
            }
            if forbiddenIDScalars.contains(scalar) { return "id contains one of / : \\ ? #" }
        }
        if count == 0 { return "id is empty" }
        return reservedProblem(id.utf8)
    }

    /// Whether `id` is one of the ids that mean something beyond one subject: `*`, Fleet Engine's
    /// wildcard (a token for it acts for every vehicle or trip), and `.` and `..`, which a server
    /// or proxy normalising dot segments (RFC 3986) reads as "this" or "the parent" resource of
    /// the provider's URL. Refused for every kind, by every verb, before any fetch.
    @inlinable
    public static func isReserved(_ id: some Collection<UInt8>) -> Bool {
        reservedProblem(id) != nil
    }

    /// Why a reserved id is refused (``isReserved(_:)``), or `nil`.
    @inlinable
    public static func reservedProblem(_ id: some Collection<UInt8>) -> String? {
        guard id.count <= 2, let first = id.first else { return nil }
        switch (first, id.count) {
        case (0x2A, 1): return "id * is a wildcard"
        case (0x2E, 1): return "id . is a dot segment"
        case (0x2E, 2) where id.dropFirst().first == 0x2E: return "id .. is a dot segment"
        default: return nil
        }
    }

    /// Whether `kind` is a well-formed kind name: 1 to 32 bytes of `a-z`, `0-9` and `-`.
    public static func isWellFormedKind(_ kind: some StringProtocol) -> Bool {
        let utf8 = kind.utf8
        guard !utf8.isEmpty, utf8.count <= WireLimits.maxKindBytes else { return false }
        return utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D }
    }
}
