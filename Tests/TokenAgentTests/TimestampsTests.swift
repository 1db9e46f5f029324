import Foundation
import TestSupport
import Testing
import TokenAgent

@Suite("HTTP and RFC 3339 dates")
struct TimestampsTests {
    @Test func httpDatesReadAsFoundationReadsThem() {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        var random = SeededGenerator(seed: 0xDA7E)
        // From 1600 on: before the Gregorian reform Foundation counts in the Julian calendar, HTTP
        // dates (and this reader) in the proleptic Gregorian one.
        for _ in 0..<2000 {
            let date = Date(
                timeIntervalSince1970: Double(Int64.random(in: -11_676_096_000...253_402_300_799, using: &random))
            )
            let text = formatter.string(from: date)
            #expect(Timestamps.httpDate(text) == date.timeIntervalSince1970, "\(text)")
        }
        #expect(Timestamps.httpDate("Sun, 06 Nov 1994 08:49:37 GMT") == 784_111_777)
        #expect(Timestamps.httpDate("  Sun, 06 Nov 1994 08:49:37 UTC ") == 784_111_777)
        #expect(Timestamps.httpDate("Fri, 31 Dec 9999 23:59:59 GMT") == 253_402_300_799)
        for bad in [
            "", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 PST", "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT x", "Sunday, 06-Nov-94 08:49:37 GMT", "1e300", "Sun, 06 Nov 1994 08:49:37",
        ] {
            #expect(Timestamps.httpDate(bad) == nil, "\(bad)")
        }
    }

    @Test func rfc3339DatesWithFractionsAndOffsets() {
        #expect(Timestamps.rfc3339("1970-01-01T00:00:00Z") == 0)
        #expect(Timestamps.rfc3339("2027-01-15T08:00:00Z") == 1_800_000_000)
        #expect(Timestamps.rfc3339("2026-11-25T10:00:00.250Z") == Timestamps.rfc3339("2026-11-25T10:00:00Z")! + 0.25)
        #expect(Timestamps.rfc3339("2026-11-25T12:00:00+02:00") == Timestamps.rfc3339("2026-11-25T10:00:00Z"))
        #expect(Timestamps.rfc3339("2026-11-25t09:30:00-00:30") == Timestamps.rfc3339("2026-11-25T10:00:00z"))
        #expect(Timestamps.rfc3339("9999-12-31T23:59:59Z") == 253_402_300_799)
        #expect(Timestamps.rfc3339("2000-02-29T00:00:00Z") == 951_782_400)
        let formatter = ISO8601DateFormatter()
        var random = SeededGenerator(seed: 0x3339)
        for _ in 0..<2000 {
            let date = Date(timeIntervalSince1970: Double(Int64.random(in: 0...253_402_300_799, using: &random)))
            #expect(Timestamps.rfc3339(formatter.string(from: date)) == date.timeIntervalSince1970)
        }
        for bad in [
            "", "2026-11-25", "2026-11-25T10:00:00", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
            "2026-11-25T10:00:00.Z", "2026-11-25T10:00:00+2:00", "+275760-09-13T00:00:00Z", "2026-11-25T10:00:00Zx",
        ] {
            #expect(Timestamps.rfc3339(bad) == nil, "\(bad)")
        }
    }
}
