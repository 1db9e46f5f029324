import Testing
import TokenWire

@Suite("Reply encoding and parsing")
struct WireReplyTests {
    @Test func encodesEveryReply() {
        #expect(WireReply.token("abc.def.ghi", expiresAt: 1_700_000_000).line == "OK abc.def.ghi 1700000000\n")
        #expect(WireReply.ok("").line == "OK\n")
        #expect(WireReply.ok("entries=1 hits=2").line == "OK entries=1 hits=2\n")
        #expect(WireReply.pong.line == "PONG\n")
        for code in WireErrorCode.allCases {
            #expect(WireReply.error(WireError(code, "why")).line == "ERR \(code.rawValue) why\n")
        }
    }

    @Test func errorTextStaysOnOneLine() {
        let line = WireReply.error(WireError(.unavailable, "a\nb\rc\u{0}d")).line
        #expect(line == "ERR unavailable a b c d\n")
    }

    @Test func parsesWhatItEncodes() {
        let replies: [WireReply] =
            [
                .token("abc.def.ghi", expiresAt: 1_700_000_000), .ok(""), .ok("GET REFRESH DROP"),
                .ok("entries=1 hits=2"), .pong,
            ] + WireErrorCode.allCases.map { .error(WireError($0, "some text")) }
        for reply in replies {
            #expect(WireReply.parse(Substring(reply.line.dropLast())) == reply)
        }
    }

    @Test func unknownRepliesDoNotParse() {
        #expect(WireReply.parse("HELLO") == nil)
        #expect(WireReply.parse("ERR nope text") == nil)
    }

    @Test func statsFields() {
        let fields = WireReply.statsFields("entries=3 hits=10 misses=2")
        #expect(fields == ["entries": "3", "hits": "10", "misses": "2"])
    }

    /// `oneLine` checks bytes, not scalars' categories: every scalar of the first plane, and a
    /// spread of the others, is kept or replaced exactly as the category rule says.
    @Test func oneLineReplacesExactlyTheControlScalars() {
        func byCategory(_ text: String) -> String {
            String(
                String.UnicodeScalarView(
                    text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }
                )
            )
        }
        var checked = 0
        for value in Array(UInt32(0)...0xFFFF) + Array(stride(from: UInt32(0x10000), through: 0x10FFFF, by: 1009)) {
            guard let scalar = Unicode.Scalar(value) else { continue }
            let text = "a\(Character(scalar))b"
            if WireReply.oneLine(text) != byCategory(text) {
                Issue.record("U+\(String(value, radix: 16)) handled unlike its category")
                return
            }
            checked += 1
        }
        #expect(checked > 60_000)
        #expect(WireReply.oneLine("x\u{85}y\u{9F}z\u{A0}") == "x y z\u{A0}", "C1 controls replaced, NBSP kept")
    }

    /// A text in one STATS field (a path with a space, a line break, `%`, non-ASCII) reads back as
    /// it was, and splits into no extra field; `-` is none.
    @Test func aStatsWordIsOneFieldAndReadsBack() {
        let texts = ["/run/fleet-tokend-state/tokens.cache", "/a b/c%d\ne=f", "/é/\u{7F}", "-", "%", ""]
        for text in texts {
            let word = StatsWord.encode(text)
            #expect(!word.utf8.contains { $0 <= 0x20 || $0 >= 0x7F }, "\(word)")
            #expect(WireReply.statsFields("a=1 x=\(word) b=2") == ["a": "1", "x": word, "b": "2"])
            #expect(StatsWord.decode(word) == text, "\(text) as \(word)")
        }
        #expect(StatsWord.encode("/a b") == "/a%20b")
        #expect(StatsWord.encode(nil) == "-")
        #expect(StatsWord.decode("-") == nil)
        #expect(StatsWord.decode("100%") == "100%", "a % without two hex digits stays")
    }
}
