import Testing

@testable import TokenAgent

@Suite("Percent-encoding (RFC 3986)")
struct PercentEncodingTests {
    /// RFC 3986's unreserved characters (section 2.3), the only bytes never encoded.
    static let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~".utf8)

    @Test func onlyTheUnreservedSetIsKept() {
        for byte in UInt8(0)...0x7F {
            let text = String(decoding: [byte], as: UTF8.self)
            let encoded = PercentEncoding.encode(text)
            #expect(PercentEncoding.isUnreserved(byte) == Self.unreserved.contains(byte), "\(byte)")
            if Self.unreserved.contains(byte) {
                #expect(encoded == text, "\(byte)")
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                #expect(encoded == "%" + (byte < 0x10 ? "0" : "") + hex, "\(byte)")
            }
        }
        for byte in UInt8(0x80)...0xFF { #expect(!PercentEncoding.isUnreserved(byte), "\(byte)") }
    }

    @Test func everyOtherUTF8ByteIsEncodedWithUpperCaseDigits() {
        #expect(PercentEncoding.encode("行") == "%E8%A1%8C")
        #expect(PercentEncoding.encode("a b%+/@") == "a%20b%25%2B%2F%40")
        #expect(PercentEncoding.encode("é\u{7F}") == "%C3%A9%7F")
        #expect(PercentEncoding.encode("") == "")
    }

    /// What a caller keeps beside the unreserved set: `/` in the AWS subject token (as Python's
    /// `urllib.parse.quote`), `@` in the IAM Credentials path's account.
    @Test func aCallerKeepsTheCharactersItNames() {
        #expect(PercentEncoding.encode("/a b/@", alsoKeeping: "/") == "/a%20b/%40")
        #expect(PercentEncoding.encode("sa@p.iam/x?y#z", alsoKeeping: "@") == "sa@p.iam%2Fx%3Fy%23z")
        #expect(PercentEncoding.encode("%40", alsoKeeping: "@") == "%2540", "a written escape is not read as @")
    }
}
