import NIOCore

/// Request frames read while a connection may take no more requests (too many replies owed, or
/// the peer not reading them), kept in order as their bytes: compact, and never more than the
/// reads that arrived before reading paused.
struct DeferredInput {
    /// Whole lines, each with its LF.
    private var lines = ByteBuffer()
    /// A line over the limit came after ``lines``: nothing after it is read.
    private var tooLong = false
    /// The last frame was news of a partial line (not yet completed by a later line).
    private var partial = false

    /// Whether no frame waits.
    var isEmpty: Bool { lines.readableBytes == 0 && !tooLong && !partial }

    /// The bytes of the lines that wait.
    var byteCount: Int { lines.readableBytes }

    /// Keeps `frame` after those already kept.
    mutating func append(_ frame: RequestFrame) {
        switch frame {
        case .line(var line):
            lines.writeBuffer(&line)
            lines.writeInteger(UInt8(ascii: "\n"))
            partial = false
        case .tooLong: tooLong = true
        case .partialLine: partial = true
        }
    }

    /// The first frame kept, removed; `nil` when none is.
    mutating func next() -> RequestFrame? {
        if let newline = lines.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) {
            let line = lines.readSlice(length: newline - lines.readerIndex)!
            lines.moveReaderIndex(forwardBy: 1)
            if lines.readableBytes == 0 { release() }
            return .line(line)
        }
        if tooLong {
            tooLong = false
            return .tooLong
        }
        if partial {
            partial = false
            return .partialLine
        }
        return nil
    }

    /// Drops every frame kept.
    mutating func removeAll() {
        release()
        tooLong = false
        partial = false
    }

    /// Empties the lines; a large buffer goes back to the allocator (a slice handed out keeps
    /// its own reference).
    private mutating func release() {
        if lines.capacity > 16 * 1024 { lines = ByteBuffer() } else { lines.clear() }
    }
}
