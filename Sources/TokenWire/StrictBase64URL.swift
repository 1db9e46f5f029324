/// Unpadded base64url (RFC 4648 §5, as JWS uses it) read strictly: only `A-Z a-z 0-9 - _`, no
/// padding, no whitespace, no length that leaves a lone character, and the unused low bits of the
/// last character zero. So each byte string has exactly one accepted spelling, and what one reader
/// decodes another cannot read differently (Foundation's base64 decoder also takes `+`, `/` and
/// `=`, and ignores non-zero trailing bits).
///
/// The one decoder of base64url from outside the agent: a provider's JWT header and payload
/// (`JWTClaims`, `TokenAcceptance`) and every part of a `signJwt` reply (`SignJWTReply`); and of
/// the client's memo, which reads the `iat` of a JWT the agent served (`MemoTable`), so it decodes
/// every payload the agent accepts and no other spelling of it.
/// Trailing `=` is refused like any other `=`: RFC 7515 (§2, "Base64url Encoding") writes JWS
/// parts with all padding omitted, so a padded part is another spelling of the same bytes.
public enum StrictBase64URL {
    /// The bytes `text` spells, or `nil` when it is not strict unpadded base64url.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = text.utf8
        guard utf8.count % 4 != 1 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(utf8.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for character in utf8 {
            guard let value = sextet(character) else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                bytes.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // Left-over bits (2 or 4) must be zero: another spelling of the same bytes is refused.
        guard accumulator == 0 else { return nil }
        return bytes
    }

    /// The six bits `character` stands for, or `nil` when it is not in the base64url alphabet.
    private static func sextet(_ character: UInt8) -> UInt8? {
        switch character {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): return character - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): return character - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): return 62
        case UInt8(ascii: "_"): return 63
        default: return nil
        }
    }
}
