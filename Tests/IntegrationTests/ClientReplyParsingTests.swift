import Testing
import TokenWire

@testable import FleetTokenClient

/// The client parses reply lines in place; it must read every line as `WireReply.parse` does.
@Suite("FleetTokenClient reply parsing")
struct ClientReplyParsingTests {
    @Test(
        arguments: [
            "OK eyJ.abc.def 1767225600", "OK eyJ.abc.def 1767225600\r", "OK a=b 123", "OK abc +12", "OK abc -12",
            "OK abc 12 x", "OK abc", "OK  123", "OK abc ", "OK abc 1234567890123456789", "OK abc 99999999999999999999",
            "OK abc 12a", "OK", "OK\r", "OK hits=3 misses=4", "PONG", "PONG\r", "ERR busy too many connections",
            "ERR unavailable HTTP 503", "ERR nonsense x", "garbage", "", "OK é 12", "OK tok 000000000000000012",
        ]
    )
    func readsEveryLineAsWireReplyDoes(_ line: String) {
        let bytes = Array(line.utf8)
        let fast = bytes.withUnsafeBufferPointer { ReplyReader.reply($0) }
        #expect(fast == WireReply.parse(Substring(line)))
    }
}
