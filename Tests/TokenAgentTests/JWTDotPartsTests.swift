import TestSupport
import Testing

@testable import TokenAgent

/// `JWTClaims.dotParts` splits ASCII on its bytes for speed; it must split exactly as
/// `split(separator: ".", omittingEmptySubsequences: false)` does, for every text.
@Suite("A token's dot-separated parts")
struct JWTDotPartsTests {
    @Test func thePartsAreThoseOfTheCharacterSplit() {
        var random = SeededGenerator(seed: 7)
        let pieces = [
            ".", "..", "a", "eyJ", "-_", "\r\n", "\r", "\n", " ", "=", ".\u{301}", "é", "e\u{301}", "\u{301}", "＊",
        ]
        var samples = ["", ".", "..", "a.b.c", ".a.", "a..b", "a.b.c.", "\r\n.\r\n", ".\u{301}a.b"]
        for _ in 0..<2000 {
            samples.append(
                (0..<Int.random(in: 0..<12, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined()
            )
        }
        for sample in samples {
            let expected = sample.split(separator: ".", omittingEmptySubsequences: false)
            let parts = JWTClaims.dotParts(sample)
            #expect(
                parts == expected && parts.map(\.startIndex) == expected.map(\.startIndex),
                "\(sample.debugDescription)"
            )
        }
    }
}
