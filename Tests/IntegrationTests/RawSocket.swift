import Foundation
import TestSupport
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A non-blocking Unix socket that writes and never reads: a slow or hostile client.
final class RawSocket: @unchecked Sendable {
    private var fd: Int32

    init(path: String) throws {
        fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else { throw AgentError("connect failed") }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
    }

    /// Writes `chunk` repeatedly until the socket would block `rounds` times; returns bytes written.
    func writeUntilBlocked(_ chunk: [UInt8], rounds: Int) async throws -> Int {
        try await offPool { self.writeUntilBlockedNow(chunk, rounds: rounds) }
    }

    private func writeUntilBlockedNow(_ chunk: [UInt8], rounds: Int) -> Int {
        var total = 0
        var blocked = 0
        while blocked < rounds {
            let n = chunk.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n > 0 {
                total += n
            } else {
                blocked += 1
                usleep(10_000)
            }
        }
        return total
    }

    /// Writes `line` (LF added) and reads one reply line, waiting at most `timeout` seconds.
    func exchange(_ line: String, timeout: Int32 = 5000) async throws -> String? {
        try await offPool { self.exchangeNow(line, timeout: timeout) }
    }

    private func exchangeNow(_ line: String, timeout: Int32) -> String? {
        let bytes = Array((line + "\n").utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else { return nil }
        return readLineBlocking(from: fd, timeoutMilliseconds: timeout)
    }

    /// Writes `bytes` without LF and reads reply lines until the agent closes the connection (or
    /// `timeout` ms pass without news).
    func sendPartialAndReadUntilClosed(_ bytes: String, timeout: Int32) async throws -> [String]? {
        try await offPool { self.sendPartialNow(bytes, timeout: timeout) }
    }

    private func sendPartialNow(_ text: String, timeout: Int32) -> [String]? {
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else { return nil }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, timeout) == 1 else { return nil }
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0, errno == EAGAIN { continue }
            if count <= 0 { break }
            received += chunk[..<count]
        }
        return String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    /// Ends the sending side (`shutdown(SHUT_WR)`): the agent sees the end of input.
    func shutdownWrite() {
        if fd >= 0 { _ = shutdown(fd, Int32(SHUT_WR)) }
    }

    func close() {
        if fd >= 0 { _ = Glibc.close(fd) }
        fd = -1
    }

    deinit { close() }
}

/// Reads one line (without its LF) from `descriptor`, waiting at most `timeoutMilliseconds` for
/// each byte; `nil` on a time-out or the end of input. Blocking: call it off the pool.
func readLineBlocking(from descriptor: Int32, timeoutMilliseconds: Int32) -> String? {
    var reply: [UInt8] = []
    var byte: UInt8 = 0
    while true {
        var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, timeoutMilliseconds) == 1, read(descriptor, &byte, 1) == 1 else { return nil }
        if byte == UInt8(ascii: "\n") { return String(decoding: reply, as: UTF8.self) }
        reply.append(byte)
    }
}
