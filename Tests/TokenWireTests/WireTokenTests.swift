import Testing
import TokenWire

@Suite("The token rule readers check")
struct WireTokenTests {
    @Test func aTokenIsOneTo16KiBOfPrintableASCIIWithoutSpaces() {
        #expect(WireToken.isWellFormed("eyJ.abc-_~!.x".utf8))
        #expect(WireToken.isWellFormed(String(repeating: "a", count: WireToken.maxBytes).utf8))
        #expect(!WireToken.isWellFormed(String(repeating: "a", count: WireToken.maxBytes + 1).utf8))
        for bad in ["", "a b", "a\nHIT forged", "a\r", "a\u{1B}[2J", "a\u{7F}", "é", "a\u{202E}"] {
            #expect(!WireToken.isWellFormed(bad.utf8), "\(bad.debugDescription)")
        }
        #expect(!WireToken.isWellFormed([0x61, 0xFF]))
    }

    @Test func anExpiryIsWithinADayOfNowTo30DaysAhead() {
        let now: Int64 = 1_800_000_000
        let day: Int64 = 86_400
        #expect(WireToken.isPlausibleExpiry(now + 3600, now: now))
        #expect(WireToken.isPlausibleExpiry(now - day, now: now))
        #expect(!WireToken.isPlausibleExpiry(now - day - 1, now: now))
        #expect(WireToken.isPlausibleExpiry(now + 31 * day, now: now))
        #expect(!WireToken.isPlausibleExpiry(now + 31 * day + 1, now: now))
        #expect(!WireToken.isPlausibleExpiry(1_000_000_000_000_000_000, now: now))
        #expect(!WireToken.isPlausibleExpiry(.min, now: now))
        #expect(WireToken.problem(token: "tok", expiresAt: now + 60, now: now) == nil)
        #expect(WireToken.problem(token: "to\nk", expiresAt: now + 60, now: now)?.contains("to\nk") == false)
    }
}
