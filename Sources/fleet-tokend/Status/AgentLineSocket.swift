import Foundation
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking Unix-socket connection to the agent that writes request lines and reads reply lines,
/// for `fleet-tokend status` (which needs the multi-line `METRICS` reply).
struct AgentLineSocket {
    /// Why talking to the agent failed.
    struct Unreachable: Error, CustomStringConvertible {
        var description: String
    }

    private let descriptor: Int32
    private var buffered: [UInt8] = []

    /// Connects to `path`, with `timeout` seconds for every read and write.
    init(path: String, timeout: Double) throws {
        let connected = UnixSocketAddress.connectStream(to: path)
        guard connected >= 0 else {
            throw Unreachable(description: "connect \(path): \(String(cString: strerror(-connected)))")
        }
        descriptor = connected
        let bounded = timeout.isFinite ? min(max(timeout, 0.001), 86_400) : 86_400
        var interval = timeval(tv_sec: Int(bounded), tv_usec: Int((bounded - bounded.rounded(.down)) * 1_000_000))
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes `text` whole.
    func write(_ text: String) throws {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let written = bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            guard written > 0 else { throw Unreachable(description: "write: \(String(cString: strerror(errno)))") }
            bytes = bytes.dropFirst(written)
        }
    }

    /// Reads one line, without its LF.
    mutating func readLine() throws -> String {
        while true {
            if let newline = buffered.firstIndex(of: 0x0A) {
                let line = String(decoding: buffered[..<newline], as: UTF8.self)
                buffered.removeSubrange(...newline)
                return line
            }
            var chunk = [UInt8](repeating: 0, count: 16 * 1024)
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            guard count > 0 else {
                throw Unreachable(
                    description: count == 0
                        ? "the agent closed the connection" : "read: \(String(cString: strerror(errno)))"
                )
            }
            buffered += chunk[..<count]
        }
    }

    /// Reads a `METRICS` reply: the exposition's lines, or the error line.
    mutating func readMetrics() throws -> Result<[String], WireError> {
        let first = try readLine()
        if first.hasPrefix("ERR "), case .error(let error) = WireReply.parse(Substring(first)) {
            return .failure(error)
        }
        var lines: [String] = []
        var line = first
        while !MetricsText.isEnd(line) {
            lines.append(line)
            line = try readLine()
        }
        return .success(lines)
    }

    /// Closes the connection.
    func close() { Glibc.close(descriptor) }
}
