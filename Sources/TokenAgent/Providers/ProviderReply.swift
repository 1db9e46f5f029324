import TokenWire

/// How a configured expiry field is to be read.
public enum ExpiryMode: String, Sendable, Hashable, Codable {
    /// Unix time; seconds or milliseconds told apart by magnitude, or an ISO 8601 date.
    case absolute
    /// Seconds from now.
    case relative
}

/// Reads a token provider's HTTP reply body liberally, because real providers differ.
///
/// - A JSON object with the token under the configured name, `token`, `access_token` or `jwt`,
///   and the expiry under the configured name, `expiration`, `expires_at`, `expirationTimestamp`,
///   `expiration_timestamp_ms` (absolute), or `expires_in` (relative seconds).
/// - A JSON object with other names: exactly one string value that parses as a JWT is the token.
/// - A `text/plain` body (or any non-JSON body that is a JWT) is the token itself.
public struct ProviderReply: Sendable, Hashable {
    /// Absolute expiry names, tried in order after the configured one.
    public static let absoluteExpiryNames = [
        "expiration", "expires_at", "expirationTimestamp", "expiration_timestamp_ms",
    ]
    /// Relative expiry names, tried after the absolute ones.
    public static let relativeExpiryNames = ["expires_in"]
    /// Token names, tried in order after the configured one.
    public static let tokenNames = ["token", "access_token", "jwt"]

    /// The configured token field name, if any (e.g. `VEHICLE_TOKEN_KEY`).
    public var tokenField: String?
    /// The configured expiry field name, if any (e.g. `TOKEN_EXPIRATION`).
    public var expiryField: String?
    /// How the configured expiry field is read.
    public var expiryMode: ExpiryMode

    /// Creates a reader with optional configured field names.
    public init(tokenField: String? = nil, expiryField: String? = nil, expiryMode: ExpiryMode = .absolute) {
        self.tokenField = tokenField
        self.expiryField = expiryField
        self.expiryMode = expiryMode
    }

    /// Reads `body` (with its `Content-Type`, if any) at wall time `now`. Returns the token and
    /// the expiry the reply states, or else `headerExpiry` (from HTTP caching headers, see
    /// ``expiry(cacheControl:expires:now:)``). The JWT's own `exp` is applied later by
    /// ``TokenAcceptance``.
    public func read(
        body: [UInt8],
        contentType: String?,
        headerExpiry: Double? = nil,
        now: Double
    ) throws -> (token: String, expiresAt: Double?) {
        let (token, expiresAt) = try readBody(body, contentType: contentType, now: now)
        return (token, expiresAt ?? headerExpiry)
    }

    /// The expiry that HTTP caching headers state: `Cache-Control: max-age=N` (relative to `now`),
    /// else an `Expires` date. How a plain-text provider can say how long its token lives.
    ///
    /// `N` is whole seconds, digits only, as RFC 9111 has it (`inf`, `1e9`, `-1` and `1.5` are
    /// not a max-age); more than 2^31 counts as 2^31, as that RFC says. ``TokenAcceptance`` then
    /// bounds whatever comes out by the kind's longest lifetime.
    public static func expiry(cacheControl: String?, expires: String?, now: Double) -> Double? {
        if let cacheControl {
            for directive in cacheControl.split(separator: ",") {
                let parts = directive.trimmingWhitespace().split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].lowercased() == "max-age", let seconds = deltaSeconds(parts[1]) {
                    return now + seconds
                }
            }
        }
        if let expires, let date = httpDate(expires) { return date }
        return nil
    }

    /// RFC 9111's delta-seconds: 1 or more ASCII digits, at most 2^31.
    static func deltaSeconds(_ text: Substring) -> Double? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        let cap = 2_147_483_648.0
        guard digits.count <= 10, let value = Double(String(text)) else { return cap }
        return min(value, cap)
    }

    /// An HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`) as Unix seconds (``Timestamps/httpDate(_:)``).
    public static func httpDate(_ text: String) -> Double? { Timestamps.httpDate(text) }

    /// The seconds a `Retry-After` header asks to wait at wall time `now`: whole seconds, or an
    /// HTTP date. `nil` when absent or unreadable; never negative.
    public static func retryAfter(_ header: String?, now: Double) -> Double? {
        guard let header = header?.trimmingWhitespace(), !header.isEmpty else { return nil }
        if header.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return header.utf8.count <= 9 ? Double(header) : nil
        }
        return httpDate(header).map { max(0, $0 - now) }
    }

    private func readBody(_ body: [UInt8], contentType: String?, now: Double) throws -> (
        token: String, expiresAt: Double?
    ) {
        let mediaType = contentType?.split(separator: ";").first?.trimmingWhitespace().lowercased()
        let trimmed = String(decoding: body, as: UTF8.self).trimmingWhitespaceAndNewlines()
        if trimmed.hasPrefix("{") {
            let object = try StrictJSON.object(
                bytes: body,
                // Which of two values counts depends on the reader: refused, named.
                repeated: { ProviderError.failed("reply gives field \($0.printable) twice") },
                notAnObject: { ProviderError.failed("reply is not valid JSON") }
            )
            return try read(object: object, now: now)
        }
        if mediaType == "text/plain" || JWTClaims(token: trimmed) != nil {
            guard String(validating: body, as: UTF8.self) != nil else {
                throw ProviderError.failed("plain-text reply is not UTF-8")
            }
            return (trimmed, nil)
        }
        throw ProviderError.failed("reply is neither a JSON object nor a plain-text token")
    }

    private func read(object: StrictJSON.Object, now: Double) throws -> (token: String, expiresAt: Double?) {
        var token: String?
        for name in [tokenField].compactMap({ $0 }) + Self.tokenNames {
            if let value = object[name] {
                guard case .string(let text) = value else {
                    throw ProviderError.failed("field \(name) is not a string")
                }
                token = text
                break
            }
        }
        if token == nil {
            let jwts = object.members.compactMap { member -> String? in
                guard case .string(let text) = member.value, JWTClaims(token: text) != nil else { return nil }
                return text
            }
            guard jwts.count == 1 else {
                throw ProviderError.failed(
                    jwts.isEmpty ? "no token field and no JWT in the reply" : "several JWTs in the reply"
                )
            }
            token = jwts[0]
        }
        var expiresAt: Double?
        if let expiryField, let value = object[expiryField] {
            expiresAt = try expiry(value, name: expiryField, mode: expiryMode, now: now)
        } else if let name = Self.absoluteExpiryNames.first(where: { object[$0] != nil }) {
            expiresAt = try expiry(object[name]!, name: name, mode: .absolute, now: now)
        } else if let name = Self.relativeExpiryNames.first(where: { object[$0] != nil }) {
            expiresAt = try expiry(object[name]!, name: name, mode: .relative, now: now)
        }
        return (token!, expiresAt)
    }

    private func expiry(_ value: StrictJSON, name: String, mode: ExpiryMode, now: Double) throws -> Double {
        var number: Double?
        switch value {
        case .number(let value):
            number = value
        case .string(let text):
            if let parsed = Double(text.trimmingWhitespace()) {
                number = parsed
            } else if mode == .absolute, let date = Timestamps.rfc3339(text) {
                return date
            }
        default:
            break
        }
        guard let number, number.isFinite else {
            throw ProviderError.failed("field \(name) is not a number or a date")
        }
        switch mode {
        case .relative: return now + number
        case .absolute: return number > 100_000_000_000 ? number / 1000 : number
        }
    }

}
