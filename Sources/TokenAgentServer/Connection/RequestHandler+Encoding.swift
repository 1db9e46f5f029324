// Replies written into the connection's output buffer, with no intermediate string.
import NIOCore
import TokenAgent
import TokenWire

extension RequestHandler {
    /// Makes the output ready for more replies: cleared once the channel has taken what it held.
    func prepareOutput() {
        if outputHandedOver {
            output.clear()
            outputHandedOver = false
        }
    }

    /// Appends the METRICS reply: the exposition and its `# EOF` line.
    func encodeMetrics() {
        prepareOutput()
        output.writeBytes(context.status.metricsReply())
    }

    /// Appends `reply` to the output: a token as `OK `, its stored bytes, a space, the expiry in
    /// decimal and LF, with no intermediate string.
    func encode(_ reply: Reply) {
        prepareOutput()
        switch reply {
        case .token(let served): Self.encodeToken(served, into: &output)
        case .line(let line): output.writeString(line.line)
        }
    }

    /// `OK <token> <expires-at>` and LF, written in one reservation of the buffer: the token's
    /// stored bytes copied once, the expiry's digits written in place.
    static func encodeToken(_ served: ServedToken, into output: inout ByteBuffer) {
        var token = served.token
        token.withUTF8 { encodeToken(UnsafeRawBufferPointer($0), expiresAt: served.expiresAt, into: &output) }
    }

    /// `OK <token> <expires-at>` and LF for a token given as its bytes.
    static func encodeToken(_ tokenBytes: UnsafeRawBufferPointer, expiresAt: Int64, into output: inout ByteBuffer) {
        let digits = decimalLength(expiresAt)
        let length = 3 + tokenBytes.count + 1 + digits + 1
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            raw[0] = UInt8(ascii: "O")
            raw[1] = UInt8(ascii: "K")
            raw[2] = UInt8(ascii: " ")
            UnsafeMutableRawBufferPointer(rebasing: raw[3..<(3 + tokenBytes.count)]).copyMemory(from: tokenBytes)
            var index = 3 + tokenBytes.count
            raw[index] = UInt8(ascii: " ")
            index += 1
            var magnitude = expiresAt.magnitude
            if expiresAt < 0 { raw[index] = UInt8(ascii: "-") }
            var digit = index + digits - 1
            repeat {
                raw[digit] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
                digit -= 1
            } while magnitude > 0
            raw[index + digits] = UInt8(ascii: "\n")
            return length
        }
    }

    /// The number of characters `value` takes in decimal, its sign included.
    static func decimalLength(_ value: Int64) -> Int {
        var magnitude = value.magnitude
        var count = value < 0 ? 2 : 1
        while magnitude >= 10 {
            magnitude /= 10
            count += 1
        }
        return count
    }
}
