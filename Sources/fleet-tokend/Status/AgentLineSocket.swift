import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking Unix-socket connection to the agent that writes request lines and reads reply lines,
/// for `fleet-tokend status` (which needs the multi-line `METRICS` reply).
///
/// Whatever answers is bounded: every read waits only until one deadline for the whole exchange,
/// a line may be at most ``WireLimits/maxReplyLineBytes`` and all the replies together at most
/// ``maxTotalBytes``.
struct AgentLineSocket {
    /// Why talking to the agent failed: no connection, or no reply before the deadline.
    struct Unreachable: Error, CustomStringConvertible {
        var description: String
    }

    /// What answered broke the protocol: a line or the replies over their limits.
    struct InvalidReply: Error, CustomStringConvertible {
        var description: String
    }

    /// The most bytes read on one connection: a `METRICS` reply at its limit and two lines more.
    static let maxTotalBytes = WireLimits.maxMetricsReplyBytes + 2 * (WireLimits.maxReplyLineBytes + 2)

    private let descriptor: Int32
    private let timeout: Double
    private let deadline: ContinuousClock.Instant
    /// Bytes read and not yet returned as lines, from `lineStart` on.
    private var buffered: [UInt8] = []
    private var lineStart = 0
    /// Bytes read so far.
    private var totalRead = 0

    /// Connects to `path`; everything after, reads and writes alike, must be done within `timeout`
    /// seconds from now.
    init(path: String, timeout: Double) throws {
        let bounded = timeout.isFinite ? min(max(timeout, 0.001), 86_400) : 86_400
        self.timeout = bounded
        deadline = .now + .milliseconds(Int64(bounded * 1000))
        // The send time-out, set before connecting, bounds the connect as well: a listener whose
        // queue is full makes it wait.
        let connected = UnixSocketAddress.connectStream(to: path, timeout: bounded)
        guard connected >= 0 else {
            let reason =
                -connected == EAGAIN
                ? "the agent's connection queue stayed full for \(bounded) s"
                : String(cString: strerror(-connected))
            // The path is not repeated here: the caller's message names the socket.
            throw Unreachable(description: "connect: \(reason)")
        }
        descriptor = connected
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
        var searched = lineStart
        while true {
            if let newline = buffered[searched...].firstIndex(of: 0x0A) {
                let line = String(decoding: buffered[lineStart..<newline], as: UTF8.self)
                lineStart = newline + 1
                return line
            }
            // The line so far, and a CR that may end it, must fit the limit.
            guard buffered.count - lineStart <= WireLimits.maxReplyLineBytes + 1 else {
                throw InvalidReply(description: "a reply line is over \(WireLimits.maxReplyLineBytes) bytes")
            }
            buffered.removeSubrange(..<lineStart)
            lineStart = 0
            searched = buffered.count
            try readMore()
        }
    }

    /// Waits until the deadline for bytes and appends them to `buffered`.
    private mutating func readMore() throws {
        guard totalRead < Self.maxTotalBytes else {
            throw InvalidReply(description: "the replies are over \(Self.maxTotalBytes) bytes")
        }
        let left = ContinuousClock.now.duration(to: deadline)
        let milliseconds = max(0, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)
        var waiting = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&waiting, 1, Int32(min(milliseconds, Int64(Int32.max))))
        guard ready > 0 else {
            if ready < 0, errno == EINTR { return }
            throw Unreachable(
                description: ready == 0
                    ? "no complete reply within \(timeout) s" : "poll: \(String(cString: strerror(errno)))"
            )
        }
        var chunk = [UInt8](repeating: 0, count: min(16 * 1024, Self.maxTotalBytes - totalRead))
        let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count > 0 else {
            if count < 0, errno == EINTR { return }
            throw Unreachable(
                description: count == 0
                    ? "the agent closed the connection" : "read: \(String(cString: strerror(errno)))"
            )
        }
        totalRead += count
        buffered += chunk[..<count]
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
