import NIOCore
import Testing
import TokenWire

@testable import TokenAgentServer

extension AgentStatus {
    /// The `STATS` reply's text as a client reads it: the line the agent writes on a connection
    /// (``writeStatsReply(into:)``), one LF-ended `OK` line, read by ``WireReply/parse(_:)``. (The
    /// same helper as TokenAgentServerTests'; each test target has its own.)
    func statsReplyText() throws -> String {
        var reply = ByteBufferAllocator().buffer(capacity: 1024)
        writeStatsReply(into: &reply)
        let line = String(buffer: reply)
        try #require(line.hasSuffix("\n") && line.filter { $0 == "\n" }.count == 1, "one line: \(line)")
        guard case .ok(let text) = WireReply.parse(Substring(line.dropLast())) else {
            Issue.record("not an OK reply: \(line)")
            return ""
        }
        return text
    }
}
