import NIOCore
import TokenWire

/// One request line as framed off the socket, or news about the framing.
enum RequestFrame {
    /// A line without its LF (a CR before the LF is still there; the parser drops it).
    case line(ByteBuffer)
    /// A line over the limit; everything after it is discarded.
    case tooLong
    /// Bytes of a line without its LF have arrived and wait for the rest (sent once per line, so
    /// the handler can time out a client that never finishes its line).
    case partialLine
}

/// Splits a connection's byte stream into LF-terminated lines of at most
/// ``WireLimits/maxRequestLineBytes`` with a ``LineFramer``. At end of input a last line without
/// LF is still a request.
///
/// The request handler frames its own input with it, read by read, rather than through a
/// `ByteToMessageHandler` in front of it: a line then costs no trip through the pipeline, no
/// `NIOAny` and no generic decoding loop (docs/BENCHMARKS-METHOD.md, "instructions per socket GET").
/// A read's bytes are borrowed: the whole lines at its front may be taken where they are
/// (``take(read:offering:)``), and only what is left is copied, to be framed by ``next()``.
struct RequestFramer {
    /// Bytes read and not yet framed: copied from the reads, from the first line not taken in
    /// place on.
    private var buffered: ByteBuffer?
    private var framer = LineFramer()
    /// After a line over the limit: the rest of the input is dropped unread.
    private var discarding = false
    private var partialReported = false

    /// Takes the bytes of one read, borrowed for the call. While nothing waits from earlier
    /// reads, each whole line at the front is handed to `body` (without its LF) where it is, and
    /// consumed when `body` took it (returned `true`): no copy, no reference count. The bytes from
    /// the first line not taken on are kept, as ``append(_:)`` keeps them.
    mutating func take(read bytes: UnsafeRawBufferPointer, offering body: (UnsafeRawBufferPointer) -> Bool) {
        guard !discarding else { return }
        var start = 0
        if buffered == nil {
            while start < bytes.count,
                let taken = Self.lineTaken(from: UnsafeRawBufferPointer(rebasing: bytes[start...]), &framer, by: body)
            {
                partialReported = false
                start += taken
            }
        }
        if start < bytes.count { append(UnsafeRawBufferPointer(rebasing: bytes[start...])) }
    }

    /// Whether bytes read are kept to be framed (a line not taken in place, or part of one).
    var holdsBytes: Bool { buffered != nil }

    /// Keeps a copy of `bytes`, after what is kept already, to be framed.
    mutating func append(_ bytes: UnsafeRawBufferPointer) {
        guard !discarding, !bytes.isEmpty else { return }
        if buffered == nil {
            buffered = ByteBufferAllocator().buffer(capacity: bytes.count)
        }
        buffered!.writeBytes(bytes)
    }

    /// The next frame of the bytes taken so far; `nil` when they hold no more.
    mutating func next() -> RequestFrame? {
        guard !discarding, var buffer = buffered else { return nil }
        // Searched through a raw pointer: a tight loop, with no buffer view to copy and destroy.
        switch buffer.withUnsafeReadableBytes({ framer.next(in: $0) }) {
        case .line(let length):
            partialReported = false
            let line = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            buffered = buffer.readableBytes > 0 ? buffer : nil
            return .line(line)
        case .tooLong:
            discarding = true
            buffered = nil
            return .tooLong
        case .needMoreData(let pending):
            guard pending > 0, !partialReported else { return nil }
            partialReported = true
            return .partialLine
        }
    }

    /// Hands the next whole line (without its LF) to `body`, borrowed for the call, when one is
    /// buffered; the line is consumed when `body` took it (returned `true`). `false` when no
    /// whole line is buffered or `body` left it: then ``next()`` frames it (and says what else
    /// there is). No slice of the buffer is made, so a line taken here costs no reference count.
    mutating func takeLine(_ body: (UnsafeRawBufferPointer) -> Bool) -> Bool {
        guard !discarding, buffered != nil else { return false }
        let taken = buffered!.withUnsafeReadableBytes { Self.lineTaken(from: $0, &framer, by: body) }
        guard let taken else { return false }
        partialReported = false
        if buffered!.readableBytes == taken {
            buffered = nil
        } else {
            buffered!.moveReaderIndex(forwardBy: taken)
        }
        return true
    }

    /// The bytes, LF included, of the whole line at the front of `bytes` when `body` took it
    /// (handed the line without its LF, where it is); `nil` when `framer` finds no whole line
    /// there or `body` left it. What both ways of taking a line in place share.
    private static func lineTaken(
        from bytes: UnsafeRawBufferPointer,
        _ framer: inout LineFramer,
        by body: (UnsafeRawBufferPointer) -> Bool
    ) -> Int? {
        guard case .line(let length) = framer.next(in: bytes),
            body(UnsafeRawBufferPointer(rebasing: bytes[..<length]))
        else { return nil }
        return length + 1
    }

    /// At end of input, once ``next()`` has given every frame: the last line, without its LF, if
    /// bytes of one are left.
    mutating func finish() -> RequestFrame? {
        guard !discarding, var buffer = buffered, buffer.readableBytes > 0 else { return nil }
        buffered = nil
        framer.reset()
        partialReported = false
        return .line(buffer.readSlice(length: buffer.readableBytes)!)
    }
}
