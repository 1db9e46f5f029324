import Foundation
import Testing
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// `fleet-tokend status --timeout` bounds the connect too: a listener whose queue is full (a
/// stuck agent, or another program on the path) makes `connect` wait for as long as it stays full.
@Suite("fleet-tokend status: the connect within --timeout")
struct StatusConnectTests {
    @Test func aFullListenQueueEndsWithinTheTimeout() async throws {
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("full.sock").path
        // A listener that never accepts, its queue (backlog 0) filled by one waiting connection.
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        let bound = UnixSocketAddress.with(path: path) { bind(listener, $0, $1) }
        #expect(bound == 0)
        #expect(listen(listener, 0) == 0)
        var waiting: [Int32] = []
        defer { for fd in waiting { close(fd) } }
        for _ in 0..<3 {
            let fd = UnixSocketAddress.connectStream(to: path, timeout: 0.2)
            if fd >= 0 { waiting.append(fd) }
        }
        #expect(!waiting.isEmpty, "the listener's queue holds a connection")
        let result = try await run(
            "/usr/bin/timeout",
            ["20", AgentProcess.binary, "status", "--socket", path, "--timeout", "1"]
        )
        // Ended by its own --timeout 1 (exit 69), not by the 20 s guard (`timeout` exits 124).
        #expect(result.status == 69, "exit \(result.status): \(result.stderr)")
        #expect(result.stderr.contains("connection queue stayed full for 1.0 s"), "\(result.stderr)")
    }
}
