import Foundation
import Logging
import Synchronization
import Systemd
import TestSupport
import Testing

/// Outside values cannot forge log lines: the journal's fields and the stderr handler's lines
/// carry each line break and control character escaped.
@Suite("Log escaping")
struct LogEscapingTests {
    static let forged =
        "cid.apps\n2030-01-01T00:00:00+0000 critical fleet-tokend: agent stopped\r\u{0}\u{7F}\u{85}\u{2028}"

    @Test func escapesLineBreaksAndControlsAndKeepsTheRest() {
        #expect(LogText.escaped("plain text, é, \\n kept") == "plain text, é, \\n kept")
        #expect(LogText.escaped("a\nb\rc\td") == "a\\nb\\rc\\td")
        #expect(
            LogText.escaped("\u{0}\u{1B}[31m\u{7F}\u{85}\u{2028}\u{2029}")
                == "\\u{0}\\u{1B}[31m\\u{7F}\\u{85}\\u{2028}\\u{2029}"
        )
        #expect(!LogText.escaped(Self.forged).contains(where: { $0.isNewline }))
    }

    @Test func journalFieldsHoldNoLineBreak() {
        let fields = JournalLogHandler.fields(
            message: "credentials read: \(Self.forged)",
            level: .info,
            identifier: "fleet-tokend",
            label: "fleet-tokend",
            metadata: ["client_id": "\(Self.forged)", "list": ["a\nb"], "nested": ["k\n": "v\r"]]
        )
        for field in fields {
            #expect(!field.contains(where: { $0.isNewline || $0.asciiValue.map { $0 < 0x20 } == true }), "\(field)")
        }
        #expect(fields.contains("MESSAGE=credentials read: " + LogText.escaped(Self.forged)))
    }

    @Test func theStderrHandlerWritesOneLinePerEntry() throws {
        let written = CapturedLog()
        var logger = Logger(label: "fleet-tokend") { _ in EscapingLogHandler(CapturedLog.Handler(log: written)) }
        logger.logLevel = .trace
        logger[metadataKey: "attached"] = "x\ny"
        logger.warning(
            "token fetch failed: \(Self.forged)",
            metadata: ["client_id": "\(Self.forged)", "count": .stringConvertible(3)]
        )
        logger.error("failed", error: ForgingError())
        let entries = written.lines.withLock { $0 }
        #expect(entries.count == 2)
        for entry in entries {
            #expect(!entry.contains(where: { $0.isNewline }), "\(entry)")
        }
        #expect(entries[0].contains("attached=x\\ny"))
        #expect(entries[0].contains("count=3"))
        #expect(entries[1].contains("error.message=line one\\nline two"))
    }

    private struct ForgingError: Error, CustomStringConvertible {
        var description: String { "line one\nline two" }
    }
}
