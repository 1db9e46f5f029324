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

/// Splits the byte stream into LF-terminated lines of at most ``WireLimits/maxRequestLineBytes``
/// with a ``LineFramer``. At end of input a last line without LF is still a request.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = RequestFrame

    private var discarding = false
    private var framer = LineFramer()
    private var partialReported = false

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if discarding {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .needMoreData
        }
        switch framer.next(in: buffer.readableBytesView) {
        case .line(let length):
            partialReported = false
            let line = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            context.fireChannelRead(Self.wrapInboundOut(.line(line)))
            return .continue
        case .tooLong:
            return tooLong(context: context, buffer: &buffer)
        case .needMoreData(let pending):
            if pending > 0, !partialReported {
                partialReported = true
                context.fireChannelRead(Self.wrapInboundOut(.partialLine))
            }
            return .needMoreData
        }
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        let state = try decode(context: context, buffer: &buffer)
        if state == .needMoreData, !discarding, buffer.readableBytes > 0 {
            let line = buffer.readSlice(length: buffer.readableBytes)!
            framer.reset()
            partialReported = false
            context.fireChannelRead(Self.wrapInboundOut(.line(line)))
        }
        return state
    }

    private mutating func tooLong(context: ChannelHandlerContext, buffer: inout ByteBuffer) -> DecodingState {
        discarding = true
        buffer.moveReaderIndex(to: buffer.writerIndex)
        context.fireChannelRead(Self.wrapInboundOut(.tooLong))
        return .needMoreData
    }
}
