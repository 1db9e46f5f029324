import Testing
import TokenWire

@Suite("JSON strings written")
struct JSONStringTests {
    @Test func quotesBackslashesAndControlCharactersAreEscaped() {
        #expect(JSONString.quoted("") == "\"\"")
        #expect(JSONString.quoted("a\"b\\c") == "\"a\\\"b\\\\c\"")
        #expect(JSONString.quoted("\n\r\t") == "\"\\n\\r\\t\"")
        #expect(JSONString.quoted("\u{0}\u{8}\u{1F}\u{7F}") == "\"\\u0000\\u0008\\u001f\\u007f\"")
        #expect(JSONString.quoted("\u{2028}\u{2029}") == "\"\\u2028\\u2029\"", "line ends to JavaScript")
        #expect(JSONString.quoted("é行 ~/") == "\"é行 ~/\"", "other text as it is")
    }

    /// As Python's `json.dumps` writes by default: everything past `~` as UTF-16 escapes.
    @Test func asciiOnlyEscapesEverythingPastTilde() {
        #expect(JSONString.quoted("é行~", asciiOnly: true) == "\"\\u00e9\\u884c~\"")
        #expect(JSONString.quoted("\u{1F600}", asciiOnly: true) == "\"\\ud83d\\ude00\"", "a surrogate pair")
        #expect(JSONString.quoted("a\"\n\u{7F}", asciiOnly: true) == "\"a\\\"\\n\\u007f\"")
    }

    /// Whatever it writes, the one reader reads back as the same text.
    @Test func theReaderReadsBackWhatItWrites() throws {
        for text in ["", "plain", "a\"b\\c\n\r\t\u{0}\u{1F}\u{7F}", "é行\u{1F600}\u{2028}", "</script>"] {
            for asciiOnly in [false, true] {
                let document = "{\"s\":" + JSONString.quoted(text, asciiOnly: asciiOnly) + "}"
                let object = try #require(StrictJSON(bytes: Array(document.utf8))?.members, "\(document)")
                #expect(object.first?.value == .string(text), "\(document)")
            }
        }
    }
}
