import CSharedMemory
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A reply line, and the descriptor that came with it (only an `SHM` reply has one).
struct ReceivedReply {
    var reply: WireReply
    var descriptor: Int32?
}

/// Why a connection's reads ended.
struct ReadFailure {
    var reason: String
    /// Whether the peer broke the protocol (a line over the limit, an unreadable line, a reply
    /// nobody asked for): calls then fail with ``FleetTokenError/invalidReply(_:)`` and are not
    /// retried. Otherwise the connection was lost (end of stream, a read error).
    var brokeProtocol: Bool
}

/// The bytes read from a connection and not yet parsed: reads as much as the socket holds and
/// parses every whole reply line of it in one pass.
///
/// Only the connection's reader thread uses it, on a blocking socket. Every line is at most
/// ``WireLimits/maxReplyLineBytes`` and a `METRICS` reply at most
/// ``WireLimits/maxMetricsReplyBytes``, so the buffer never grows. Reads take descriptors
/// (`SCM_RIGHTS`) too: the agent sends a segment's descriptor with the first byte of its `SHM`
/// reply, so a descriptor is given to the next `OK size=…` reply parsed. At most one is held: one
/// that came with bytes parsed into other replies, and any beyond the first of a read, are closed.
struct ReplyReader {
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    private var filled = 0
    /// Descriptors received and not yet given to a reply.
    private var descriptors: [Int32] = []
    /// The lines of a `METRICS` reply read so far: it is the one reply of several lines, from a
    /// first line starting with `#` to the line `# EOF` (docs/PROTOCOL.md).
    private var metricsBody: [UInt8]?

    /// Reads what `fd` holds (waiting for something to arrive) and appends the replies of every
    /// whole line to `replies`. Returns why the connection is over (end of stream, a read error,
    /// a reply that breaks the protocol), or `nil`.
    mutating func readReplies(from fd: Int32, into replies: inout [ReceivedReply]) -> ReadFailure? {
        while true {
            let room = buffer.count - filled
            var received: Int32 = -1
            var receivedCount: Int32 = 0
            // One descriptor at most: the C side closes any more that came with the bytes.
            let count = buffer.withUnsafeMutableBytes { raw in
                fsm_receive(fd, raw.baseAddress! + filled, room, &received, 1, &receivedCount)
            }
            if receivedCount > 0 { descriptors.append(received) }
            if count > 0 {
                filled += count
                if let problem = parseLines(into: &replies) { return problem }
                // A short read took all the socket held: hand these replies over first.
                if count < room { return nil }
            } else if count == 0 {
                return ReadFailure(reason: "the agent closed the connection", brokeProtocol: false)
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return nil
            } else {
                return ReadFailure(reason: "read: \(String(cString: strerror(errno)))", brokeProtocol: false)
            }
        }
    }

    /// Closes the descriptors no reply took (the connection is over).
    mutating func closeDescriptors() {
        for descriptor in descriptors { close(descriptor) }
        descriptors = []
    }

    /// Parses every whole line in the buffer and keeps the partial one at its start.
    private mutating func parseLines(into replies: inout [ReceivedReply]) -> ReadFailure? {
        let filled = self.filled
        var start = 0
        var descriptors = self.descriptors
        var metricsBody = self.metricsBody
        defer {
            self.descriptors = descriptors
            self.metricsBody = metricsBody
        }
        let problem = buffer.withUnsafeBufferPointer { bytes -> String? in
            let base = bytes.baseAddress!
            while start < filled, let newline = memchr(base + start, 0x0A, filled - start) {
                let end = base.distance(to: newline.assumingMemoryBound(to: UInt8.self))
                let line = UnsafeBufferPointer(rebasing: bytes[start..<end])
                if Self.isTooLong(line.count, endsWithCR: line.last == 0x0D) { return Self.tooLong }
                if metricsBody != nil || line.first == UInt8(ascii: "#") {
                    // A CR before the LF is dropped, as on every line (docs/PROTOCOL.md): `# EOF\r` ends
                    // the reply too.
                    let text = line.last == 0x0D ? UnsafeBufferPointer(rebasing: line.dropLast()) : line
                    if text.elementsEqual(MetricsText.endLine.utf8) {
                        replies.append(ReceivedReply(reply: .ok(String(decoding: metricsBody ?? [], as: UTF8.self))))
                        metricsBody = nil
                    } else {
                        if metricsBody == nil { metricsBody = [] }
                        guard metricsBody!.count + text.count + 1 <= WireLimits.maxMetricsReplyBytes else {
                            return "METRICS reply over \(WireLimits.maxMetricsReplyBytes) bytes"
                        }
                        metricsBody!.append(contentsOf: text)
                        metricsBody!.append(0x0A)
                    }
                    start = end + 1
                    continue
                }
                guard let reply = Self.reply(UnsafeBufferPointer(rebasing: bytes[start..<end])) else {
                    return "unreadable reply from the agent"
                }
                var descriptor: Int32?
                if case .ok(let text) = reply, text.hasPrefix("size="), !descriptors.isEmpty {
                    descriptor = descriptors.removeFirst()
                }
                replies.append(ReceivedReply(reply: reply, descriptor: descriptor))
                start = end + 1
            }
            // What is left is one partial line: a line that cannot end within the limit is refused now.
            let partial = filled - start
            if partial > 0, Self.isTooLong(partial, endsWithCR: bytes[filled - 1] == 0x0D) { return Self.tooLong }
            return nil
        }
        if start > 0 {
            buffer.withUnsafeMutableBytes { raw in
                if start < filled { memmove(raw.baseAddress!, raw.baseAddress! + start, filled - start) }
            }
            self.filled = filled - start
        }
        // A descriptor rides with a reply's first byte. With every byte parsed, one no reply took
        // came with a reply that carries none; a partial line can take only one.
        let keep = self.filled > 0 ? 1 : 0
        while descriptors.count > keep { close(descriptors.removeLast()) }
        return problem.map { ReadFailure(reason: $0, brokeProtocol: true) }
    }

    private static let tooLong = "reply line over \(WireLimits.maxReplyLineBytes) bytes"

    /// Whether a line of `count` bytes (without its LF) is over the limit; a CR before the LF is
    /// not counted.
    private static func isTooLong(_ count: Int, endsWithCR: Bool) -> Bool {
        (endsWithCR ? count - 1 : count) > WireLimits.maxReplyLineBytes
    }

    /// The reply of one line (without its LF). `OK <token> <expires-at>` with a plain token and
    /// decimal digits is read here without building the line as a string; any other line is read
    /// by ``WireReply/parse(_:)``, which gives the same answer for those lines.
    static func reply(_ line: UnsafeBufferPointer<UInt8>) -> WireReply? {
        var count = line.count
        if count > 0, line[count - 1] == 0x0D { count -= 1 }
        if count > 5, line[0] == UInt8(ascii: "O"), line[1] == UInt8(ascii: "K"), line[2] == 0x20,
            let reply = token(UnsafeBufferPointer(rebasing: line[3..<count]))
        {
            return reply
        }
        // The whole line: the parser drops the one CR before the LF itself (a second is the line's).
        return WireReply.parse(Substring(String(decoding: line, as: UTF8.self)))
    }

    /// `<token> <expires-at>`: one space, a token without `=`, 1 to 18 decimal digits.
    private static func token(_ rest: UnsafeBufferPointer<UInt8>) -> WireReply? {
        let base = rest.baseAddress!
        guard let space = memchr(base, 0x20, rest.count) else { return nil }
        let tokenLength = base.distance(to: space.assumingMemoryBound(to: UInt8.self))
        let digits = UnsafeBufferPointer(rebasing: rest[(tokenLength + 1)...])
        guard tokenLength > 0, (1...18).contains(digits.count), memchr(base, 0x3D, tokenLength) == nil else {
            return nil
        }
        var expiresAt: Int64 = 0
        for digit in digits {
            guard digit >= 0x30, digit <= 0x39 else { return nil }
            expiresAt = expiresAt * 10 + Int64(digit - 0x30)
        }
        let token = String(decoding: UnsafeBufferPointer(rebasing: rest[..<tokenLength]), as: UTF8.self)
        return .token(token, expiresAt: expiresAt)
    }
}
