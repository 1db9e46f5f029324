import NIOCore

/// Closes the connection once more than `limit` bytes have come from the peer since the last
/// answer was written (``answered()``): a bound on each request, however long a keep-alive
/// connection lives.
final class RequestByteLimit: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let limit: Int
    private let onExceeded: () -> Void
    private var received = 0
    private var exceeded = false

    /// `onExceeded` is called when the limit closes the connection.
    init(limit: Int, onExceeded: @escaping () -> Void = {}) {
        self.limit = limit
        self.onExceeded = onExceeded
    }

    /// An answer was written: the next request has `limit` bytes again.
    func answered() { received = 0 }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        received += unwrapInboundIn(data).readableBytes
        guard received <= limit else {
            if !exceeded {
                exceeded = true
                onExceeded()
            }
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
}
