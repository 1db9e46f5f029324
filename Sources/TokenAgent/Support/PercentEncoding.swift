/// Percent-encoding (RFC 3986, section 2.1), the one the agent's outbound requests use: a
/// provider URL's id, the IAM Credentials path's account, form bodies, and the AWS request
/// signature's canonical query and subject token.
enum PercentEncoding {
    /// Whether `byte` is one of RFC 3986's unreserved characters (section 2.3), which are never
    /// encoded: `A-Z`, `a-z`, `0-9`, `-`, `.`, `_` and `~`.
    static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x41...0x5A, 0x61...0x7A, 0x30...0x39, 0x2D, 0x2E, 0x5F, 0x7E: return true
        default: return false
        }
    }

    /// `text`'s UTF-8 bytes, each unreserved one and each of `alsoKeeping`'s as it is, every other
    /// one `%XX` (upper-case hex digits).
    static func encode(_ text: String, alsoKeeping: String = "") -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var encoded: [UInt8] = []
        encoded.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            if isUnreserved(byte) || alsoKeeping.utf8.contains(byte) {
                encoded.append(byte)
            } else {
                encoded += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }
}
