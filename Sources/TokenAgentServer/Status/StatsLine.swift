import NIOCore

/// The `STATS` reply, built in one byte array and written into a connection's output at once:
/// `OK `, `name=value` fields separated by spaces, LF. A peer may pipeline thousands of `STATS`,
/// so the line goes through no string and no per-field write into the output buffer. Every name
/// is ASCII (the agent's own field names and kind names, which are `a-z`, `0-9` and `-`), so the
/// line needs no control-character check.
struct StatsLine {
    private var bytes: [UInt8] = []

    init() {
        bytes.reserveCapacity(1024)
        append("OK")
    }

    /// Adds `name=value`.
    mutating func add(_ name: StaticString, _ value: Int) {
        append(" ")
        append(name)
        append("=")
        appendDecimal(value)
    }

    /// Adds `prefix` + `kind` `=value`: a per-kind field.
    mutating func add(_ prefix: StaticString, kind: String, _ value: Int) {
        append(" ")
        append(prefix)
        bytes.append(contentsOf: kind.utf8)
        append("=")
        appendDecimal(value)
    }

    /// Adds `name=text` for a text without spaces or control characters (a version, `off`).
    mutating func add(_ name: StaticString, text: String) {
        append(" ")
        append(name)
        append("=")
        bytes.append(contentsOf: text.utf8)
    }

    /// Writes the line and its LF to `output`.
    mutating func write(to output: inout ByteBuffer) {
        append("\n")
        output.writeBytes(bytes)
    }

    private mutating func append(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    private mutating func appendDecimal(_ value: Int) {
        if value < 0 { append("-") }
        var magnitude = value.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: UInt.max has 20 digits
        withUnsafeMutableBytes(of: &digits) { scratch in
            var start = scratch.count
            repeat {
                start -= 1
                scratch[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            bytes.append(contentsOf: scratch[start...])
        }
    }
}
