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

/// The bytes read from a connection and not yet parsed: reads as much as the socket holds and
/// parses every whole reply line of it in one pass.
///
/// Only the connection's reader thread uses it, on a blocking socket. Reads take descriptors
/// (`SCM_RIGHTS`) too: the agent sends a segment's descriptor with the first byte of its `SHM`
/// reply, so each one is given to the next `OK size=…` reply parsed.
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
    /// an unreadable reply), or `nil`.
    mutating func readReplies(from fd: Int32, into replies: inout [ReceivedReply]) -> String? {
        while true {
            if filled == buffer.count { buffer.append(contentsOf: repeatElement(0, count: buffer.count)) }
            let room = buffer.count - filled
            var received: (Int32, Int32, Int32, Int32) = (-1, -1, -1, -1)
            var receivedCount: Int32 = 0
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &received) { fds in
                    fds.withMemoryRebound(to: Int32.self, capacity: 4) {
                        fsm_receive(fd, raw.baseAddress! + filled, room, $0, 4, &receivedCount)
                    }
                }
            }
            for index in 0..<Int(receivedCount) {
                descriptors.append([received.0, received.1, received.2, received.3][index])
            }
            if count > 0 {
                filled += count
                if let problem = parseLines(into: &replies) { return problem }
                // A short read took all the socket held: hand these replies over first.
                if count < room { return nil }
            } else if count == 0 {
                return "the agent closed the connection"
            } else if errno == EINTR {
                continue
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return nil
            } else {
                return "read: \(String(cString: strerror(errno)))"
            }
        }
    }

    /// Parses every whole line in the buffer and keeps the partial one at its start.
    private mutating func parseLines(into replies: inout [ReceivedReply]) -> String? {
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
                if metricsBody != nil || line.first == UInt8(ascii: "#") {
                    if line.elementsEqual("# EOF".utf8) {
                        replies.append(ReceivedReply(reply: .ok(String(decoding: metricsBody ?? [], as: UTF8.self))))
                        metricsBody = nil
                    } else {
                        if metricsBody == nil { metricsBody = [] }
                        metricsBody!.append(contentsOf: line)
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
            return nil
        }
        if start > 0 {
            buffer.withUnsafeMutableBytes { raw in
                if start < filled { memmove(raw.baseAddress!, raw.baseAddress! + start, filled - start) }
            }
            self.filled = filled - start
        }
        return problem
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
        let text = String(decoding: UnsafeBufferPointer(rebasing: line[0..<count]), as: UTF8.self)
        return WireReply.parse(Substring(text))
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
