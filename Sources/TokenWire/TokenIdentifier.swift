/// Fleet Engine's rules for ids and the agent's rules for kind names.
public enum TokenIdentifier {
    /// The characters an id may not hold, whatever else it holds: `/ : \ ? #`.
    static let forbiddenIDScalars: Set<Unicode.Scalar> = ["/", ":", "\\", "?", "#"]

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
            if forbiddenIDScalars.contains(scalar) { return "id contains one of / : ? # or a backslash" }
        }
        if count == 0 { return "id is empty" }
        return reservedProblem(id.utf8)
    }

    /// Whether `id` is one of the ids that mean something beyond one subject: `*`, Fleet Engine's
    /// wildcard (a token for it acts for every vehicle or trip), and `.` and `..`, which a server
    /// or proxy normalising dot segments (RFC 3986) reads as "this" or "the parent" resource of
    /// the provider's URL; and the ids that become one of these under Unicode compatibility
    /// normalisation (NFKC), such as `＊` or `‥`, which a provider's stack may apply. Refused for
    /// every kind, by every verb, before any fetch.
    @inlinable
    public static func isReserved(_ id: some Collection<UInt8>) -> Bool {
        reservedProblem(id) != nil
    }

    /// Why a reserved id is refused (``isReserved(_:)``), or `nil`.
    @inlinable
    public static func reservedProblem(_ id: some Collection<UInt8>) -> String? {
        // The length first: every reserved id and look-alike has at most 6 bytes, and most ids
        // have more (`count` of a string's UTF-8 costs less than its `first`).
        let count = id.count
        guard count <= 6, let first = id.first else { return nil }
        if count <= 2 {
            switch (first, count) {
            case (0x2A, 1): return "id * is a wildcard"
            case (0x2E, 1): return "id . is a dot segment"
            case (0x2E, 2) where id.dropFirst().first == 0x2E: return "id .. is a dot segment"
            default: return nil
            }
        }
        // Every look-alike is 3-byte UTF-8 starting E2 or EF, or mixes those with `.`/`*`.
        guard first == 0x2E || first == 0x2A || first == 0xE2 || first == 0xEF else { return nil }
        return lookAlikeProblem(Array(id))
    }

    /// Why `bytes` is refused when they normalise (NFKC) to `*`, `.` or `..`, or `nil`. The
    /// scalars that do: U+2024, U+FE52, U+FF0E (`.`), U+2025 (`..`), U+FE61, U+FF0A (`*`).
    @usableFromInline
    static func lookAlikeProblem(_ bytes: [UInt8]) -> String? {
        guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
        var folded = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x2E, 0x2024, 0xFE52, 0xFF0E: folded += "."
            case 0x2025: folded += ".."
            case 0x2A, 0xFE61, 0xFF0A: folded += "*"
            default: return nil
            }
        }
        switch folded {
        case "*": return "id \(text) is the wildcard * once normalised"
        case ".", "..": return "id \(text) is the dot segment \(folded) once normalised"
        default: return nil
        }
    }

    /// The kinds whose one token acts for the whole fleet (the wildcard token types of Google's
    /// Fleet Engine auth library): each is asked for with the id `*` and no other. The agent
    /// serves them only from an issuer configured for them by name, with an `allow` rule.
    public static let wildcardKinds: Set<String> = [
        "server", "delivery-server", "fleet-reader", "delivery-fleet-reader",
    ]

    /// Whether `kind`'s bytes name a wildcard kind (``wildcardKinds``); checks lengths first, so
    /// the common kinds cost a comparison or two.
    @inlinable
    public static func isWildcardKind(_ kind: UnsafeRawBufferPointer) -> Bool {
        switch kind.count {
        case 6: return kind.elementsEqual("server".utf8)
        case 12: return kind.elementsEqual("fleet-reader".utf8)
        case 15: return kind.elementsEqual("delivery-server".utf8)
        case 21: return kind.elementsEqual("delivery-fleet-reader".utf8)
        default: return false
        }
    }

    /// Whether `kind` names a wildcard kind (``wildcardKinds``), by its length and then its bytes:
    /// most kinds are told apart by their length alone, with no hash of the name (which
    /// ``wildcardKinds``'s `contains` makes).
    @inlinable
    public static func isWildcardKind(_ kind: String) -> Bool {
        switch kind.utf8.count {
        case 6, 12, 15, 21:
            var kind = kind
            return kind.withUTF8 { isWildcardKind(UnsafeRawBufferPointer($0)) }
        default: return false
        }
    }

    /// The one id of a wildcard kind.
    public static let wildcardID = "*"

    /// Why `id` cannot be asked for under `kind`, or `nil`: a wildcard kind (``wildcardKinds``)
    /// takes only `*`; every other kind follows ``problem(withID:)``, which refuses `*`.
    public static func problem(kind: some StringProtocol, id: Substring) -> String? {
        if wildcardKinds.contains(String(kind)) {
            return id == "*" ? nil : "kind \(kind) acts for the whole fleet: its only id is *"
        }
        return problem(withID: id)
    }

    /// Why the key `kind`/`id` is refused before any fetch: a reserved id (``reservedProblem(_:)``)
    /// under a kind that is not a wildcard kind, or an id other than `*` under a wildcard kind.
    /// An access-token entry's kind (``AccessTokenKind``) takes its name alone. Inlinable: the
    /// client asks it on every read, shared-memory reads included, and unspecialized it cost three
    /// times the rest of an access token's read.
    @inlinable
    public static func keyProblem(kind: String, id: some Collection<UInt8>) -> String? {
        if AccessTokenKind.isAccessKind(kind) { return AccessTokenKind.keyProblem(kind: kind, id: id) }
        if isWildcardKind(kind) {
            return id.count == 1 && id.first == 0x2A ? nil : "kind \(kind) acts for the whole fleet: its only id is *"
        }
        return reservedProblem(id)
    }

    /// Whether `kind` is a well-formed kind name: 1 to 32 bytes of `a-z`, `0-9` and `-`.
    public static func isWellFormedKind(_ kind: some StringProtocol) -> Bool {
        let utf8 = kind.utf8
        guard !utf8.isEmpty, utf8.count <= WireLimits.maxKindBytes else { return false }
        return utf8.allSatisfy(isKindByte)
    }

    /// Whether a kind name may hold `byte`: `a-z`, `0-9` and `-`. The rule a byte at a time;
    /// ``ByteRun/outsideKind(_:)`` tests eight at once.
    public static func isKindByte(_ byte: UInt8) -> Bool {
        (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D
    }
}
