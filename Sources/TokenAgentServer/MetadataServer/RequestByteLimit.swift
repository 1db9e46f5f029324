import NIOCore

/// Bounds each request of a connection in bytes and in time, however long a keep-alive
/// connection lives: it is closed once more than `limit` bytes have come from the peer since the
/// last answer was written (``answered()``), or once `deadline` has passed since a request's first
/// byte without the request being whole (``requestEnded()``). A peer that trickles a body one byte
/// at a time is closed at the deadline, whatever the idle time-out would allow.
final class RequestByteLimit: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let limit: Int
    private let deadline: TimeAmount
    private let onExceeded: () -> Void
    private let onDeadline: @Sendable () -> Void
    private var received = 0
    private var exceeded = false
    /// The close at the deadline of the request coming now; `nil` between requests.
    private var pending: Scheduled<Void>?

    /// `onExceeded` is called when the byte limit closes the connection, `onDeadline` when the
    /// deadline does.
    init(
        limit: Int,
        deadline: TimeAmount = .seconds(10),
        onExceeded: @escaping () -> Void = {},
        onDeadline: @escaping @Sendable () -> Void = {}
    ) {
        self.limit = limit
        self.deadline = deadline
        self.onExceeded = onExceeded
        self.onDeadline = onDeadline
    }

    /// An answer was written: the next request has `limit` bytes again.
    func answered() { received = 0 }

    /// The request is whole: its deadline is met. The next byte starts the next request's.
    func requestEnded() {
        pending?.cancel()
        pending = nil
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        requestEnded()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data).readableBytes
        received += bytes
        guard received <= limit else {
            if !exceeded {
                exceeded = true
                onExceeded()
            }
            context.close(promise: nil)
            return
        }
        if pending == nil, bytes > 0 {
            let channel = context.channel
            let onDeadline = self.onDeadline
            pending = context.eventLoop.scheduleTask(in: deadline) {
                onDeadline()
                channel.close(promise: nil)
            }
        }
        context.fireChannelRead(data)
    }
}
