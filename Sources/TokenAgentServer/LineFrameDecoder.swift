import NIOCore
import TokenWire

/// One request line as framed off the socket, or the news that a line was too long.
enum RequestFrame {
    /// A line without its LF (a CR before the LF is still there; the parser drops it).
    case line(ByteBuffer)
    /// A line over the limit; everything after it is discarded.
    case tooLong
}

/// Splits the byte stream into LF-terminated lines of at most ``WireLimits/maxRequestLineBytes``.
/// At end of input a last line without LF is still a request.
struct LineFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = RequestFrame

    private var discarding = false
    private var searchedBytes = 0

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        if discarding {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            return .needMoreData
        }
        let view = buffer.readableBytesView
        let limit = WireLimits.maxRequestLineBytes
        // Only look at bytes not already searched, and never further than one line may reach.
        let searchEnd = view.startIndex + min(view.count, limit + 2)
        let searchStart = view.startIndex + min(searchedBytes, view.count)
        if let newline = view[searchStart..<searchEnd].firstIndex(of: UInt8(ascii: "\n")) {
            let length = newline - view.startIndex
            let content = length > 0 && view[newline - 1] == UInt8(ascii: "\r") ? length - 1 : length
            searchedBytes = 0
            if content > limit { return tooLong(context: context, buffer: &buffer) }
            let line = buffer.readSlice(length: length)!
            buffer.moveReaderIndex(forwardBy: 1)
            context.fireChannelRead(Self.wrapInboundOut(.line(line)))
            return .continue
        }
        if view.count > limit + 1 { return tooLong(context: context, buffer: &buffer) }
        searchedBytes = view.count
        return .needMoreData
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        let state = try decode(context: context, buffer: &buffer)
        if state == .needMoreData, !discarding, buffer.readableBytes > 0 {
            let line = buffer.readSlice(length: buffer.readableBytes)!
            searchedBytes = 0
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
