import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The few claims of a JWT the agent reads. No signature check: the agent is not the audience,
/// it only reads `exp` and `authorization` to bound caching and catch a token for the wrong id.
///
/// The payload is read strictly (``StrictJSON``): what one reader could take one way and Fleet
/// Engine another is reported, not resolved. A duplicate claim is a ``problem``; an
/// `authorization` claim that is not an object of distinct string entries is
/// ``Authorization/ambiguous(_:)``.
public struct JWTClaims: Sendable {
    /// What the `authorization` claim says.
    public enum Authorization: Sendable, Equatable {
        /// No `authorization` claim.
        case absent
        /// An object of string entries, names lower-cased in ASCII (`VehicleId` is `vehicleid`),
        /// no two alike.
        case entries([String: String])
        /// Present but not an object of distinct string entries: why.
        case ambiguous(String)
    }

    /// The `exp` claim, if present and numeric (possibly infinite: see ``problem``).
    public var expiresAt: Double?
    /// The `iat` claim, if present, numeric and finite.
    public var issuedAt: Double?
    /// The `authorization` claim.
    public var authorization: Authorization
    /// Why the payload as a whole cannot be trusted, if it cannot: a claim given twice, an `exp`
    /// that is not a finite number, or any number past a Double's range (`1e400`) in any claim.
    public var problem: String?

    /// Decodes the payload of a compact JWS; `nil` when `token` is not a JWT (three parts, the
    /// first two strict unpadded base64url (``StrictBase64URL``) of a JSON object header with
    /// `alg` and of a JSON object payload).
    public init?(token: String) {
        let parts = Self.dotParts(token)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            let header = Self.decodeObject(parts[0]), header.contains(where: { $0.name == "alg" }),
            let payload = Self.decodeObject(parts[1])
        else { return nil }
        var seen: Set<String> = []
        var problem: String?
        var expiresAt: Double?
        var issuedAt: Double?
        var authorization = Authorization.absent
        for member in payload {
            if !seen.insert(member.name).inserted {
                problem = problem ?? "claim \(Self.printable(member.name)) appears twice"
                continue
            }
            switch member.name {
            case "exp":
                guard case .number(let value) = member.value, value.isFinite else {
                    problem = problem ?? "exp is not a finite number"
                    continue
                }
                expiresAt = value
            case "iat":
                if case .number(let value) = member.value, value.isFinite { issuedAt = value }
            case "authorization":
                authorization = Self.authorization(member.value)
            default:
                continue
            }
        }
        // A number past a Double's range (`1e400`) anywhere in the payload: the strict reader
        // takes it as infinite, but Foundation's reader, and Go's into a float64, refuse the whole
        // payload, so its claims might be read no further by Fleet Engine either.
        if problem == nil, let member = payload.first(where: { Self.holdsNonFiniteNumber($0.value) }) {
            problem = "claim \(Self.printable(member.name)) holds a number that is not finite"
        }
        self.expiresAt = expiresAt
        self.issuedAt = issuedAt
        self.authorization = authorization
        self.problem = problem
    }

    /// Whether `token` is shaped like a JWT to another reader, however its claims read: three
    /// dot-separated parts whose first a lenient reader decodes to text starting with `{`
    /// (``mayReadAsObject(_:)``). A token of this shape that ``init(token:)`` cannot read is not
    /// treated as an opaque token: another reader may well read its claims, and see what this one
    /// could not check.
    public static func looksLikeJWT(_ token: String) -> Bool {
        let parts = dotParts(token)
        guard parts.count == 3, !parts[0].isEmpty else { return false }
        return mayReadAsObject(parts[0])
    }

    /// `token`'s dot-separated parts, exactly as `split(separator: ".", omittingEmptySubsequences:
    /// false)` gives them. An ASCII token (every token the agent accepts is printable ASCII) is
    /// split on its bytes, which for ASCII is the same split without walking `Character`s: that
    /// walk was most of the time a cache snapshot's 100,000 tokens took to check at start. Other
    /// text takes the `Character` split, where a `.` joined by a combining mark is no separator.
    static func dotParts(_ token: String) -> [Substring] {
        let utf8 = token.utf8
        let dots: [Int]? =
            utf8.withContiguousStorageIfAvailable { bytes in
                var dots: [Int] = []
                for (offset, byte) in bytes.enumerated() {
                    if byte >= 0x80 { return nil }
                    if byte == UInt8(ascii: ".") { dots.append(offset) }
                }
                return dots
            } ?? nil
        guard let dots else { return token.split(separator: ".", omittingEmptySubsequences: false) }
        var parts: [Substring] = []
        parts.reserveCapacity(dots.count + 1)
        var start = utf8.startIndex
        for offset in dots {
            let dot = utf8.index(utf8.startIndex, offsetBy: offset)
            parts.append(token[start..<dot])
            start = utf8.index(after: dot)
        }
        parts.append(token[start..<utf8.endIndex])
        return parts
    }

    /// Whether a lenient reader may take `part` for base64 of a JSON object: decoded as many JWT
    /// libraries do (`+` and `/` as well as `-` and `_`, padding or none), text starting, past
    /// whitespace and a byte-order mark, with `{`. Only ever asked to fail closed (a token another
    /// reader takes for a JWT is never served as opaque); claims are read through
    /// ``StrictBase64URL`` alone.
    static func mayReadAsObject(_ part: Substring) -> Bool {
        // Strict base64url, as every JWT part the agent accepts is, decodes to the bytes the
        // lenient reader decodes (it takes a superset, with the same bytes for these); only
        // another spelling needs Foundation's decoder.
        if let strict = StrictBase64URL.decode(part) { return startsLikeAnObject(strict) }
        var base64 = String(part).replacing("-", with: "+").replacing("_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64).map(startsLikeAnObject) ?? false
    }

    /// Whether `bytes` start, past whitespace and a byte-order mark, with `{`.
    private static func startsLikeAnObject(_ bytes: some Collection<UInt8>) -> Bool {
        bytes.first(where: { ![0x20, 0x09, 0x0A, 0x0D, 0xEF, 0xBB, 0xBF].contains($0) }) == UInt8(ascii: "{")
    }

    /// Whether `value` is, or holds at any depth, a number that is not finite.
    static func holdsNonFiniteNumber(_ value: StrictJSON) -> Bool {
        switch value {
        case .number(let number): return !number.isFinite
        case .array(let items): return items.contains(where: holdsNonFiniteNumber)
        case .object(let members): return members.contains { holdsNonFiniteNumber($0.value) }
        default: return false
        }
    }

    /// Whether any entry of the `authorization` claim is `*` (Fleet Engine's wildcard).
    public var holdsWildcard: Bool {
        if case .entries(let entries) = authorization { return entries.values.contains("*") }
        return false
    }

    private static func authorization(_ value: StrictJSON) -> Authorization {
        guard let members = value.members else { return .ambiguous("authorization is not an object") }
        var entries: [String: String] = [:]
        var names: Set<String> = []
        for member in members {
            // Names other readers could fold or cut differently (non-ASCII, controls) are refused.
            guard member.name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                return .ambiguous("authorization entry \(printable(member.name)) is not a printable ASCII name")
            }
            guard case .string(let text) = member.value else {
                return .ambiguous("authorization entry \(printable(member.name)) is not a string")
            }
            guard names.insert(member.name).inserted else {
                return .ambiguous("authorization entry \(printable(member.name)) appears twice")
            }
            let name = lowercasedASCII(member.name)
            guard entries[name] == nil else {
                return .ambiguous("authorization entries \(printable(name)) differ only in case")
            }
            entries[name] = text
        }
        return .entries(entries)
    }

    /// `text` with `A-Z` lowered and nothing else changed: claim names compare this way, so no
    /// Unicode case mapping (the Kelvin sign lowers to `k`) can make one name of two.
    static func lowercasedASCII(_ text: String) -> String {
        String(decoding: text.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
    }

    /// A claim name fit for an error message: printable ASCII, at most 40 bytes.
    static func printable(_ name: String) -> String {
        let bytes = name.utf8.prefix(40).map { $0 > 0x20 && $0 < 0x7F ? $0 : UInt8(ascii: "?") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Encodes bytes as unpadded base64url text.
    public static func base64URLEncode(_ data: some Sequence<UInt8>) -> String {
        Data(data).base64EncodedString()
            .replacing("+", with: "-")
            .replacing("/", with: "_")
            .replacing("=", with: "")
    }

    /// The members of the JSON object `part` spells in strict base64url (``StrictBase64URL``).
    private static func decodeObject(_ part: Substring) -> [StrictJSON.Member]? {
        guard let bytes = StrictBase64URL.decode(part) else { return nil }
        return StrictJSON(bytes: bytes)?.members
    }
}
