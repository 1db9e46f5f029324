import NIOCore
import TokenAgent

/// A ``RequestHandler`` in a SwiftNIO pipeline: tests and benchmarks drive the handler on an
/// `EmbeddedChannel` through it. (The agent serves its socket with its own loop,
/// ``SocketLoop``.) It has no socket descriptor to give, so `SHM` offers fail on it.
final class ChannelRequestHandler: ChannelDuplexHandler, ConnectionTransport {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The handler served, dropped once this is removed from the pipeline (the handler keeps
    /// this transport for the closures it has handed out, so the two must not hold each other).
    private var handler: RequestHandler!
    private var context: ChannelHandlerContext!

    init(_ handler: RequestHandler) {
        self.handler = handler
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        handler.transport = self
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        handler = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        handler.activate()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        handler.startTurn()
        handler.received(unwrapInboundIn(data))
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        handler.readComplete()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            handler.inputEnded()
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        handler.inactive()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        handler.failed(error)
    }

    func read(context: ChannelHandlerContext) {
        if handler?.wantsToRead() ?? true { context.read() }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        handler.writabilityChanged()
        context.fireChannelWritabilityChanged()
    }

    // MARK: ConnectionTransport

    var isWritable: Bool { context.channel.isWritable }

    func write(_ bytes: ByteBuffer) {
        context.writeAndFlush(wrapOutboundOut(bytes), promise: nil)
    }

    func read() { context.read() }

    func close() { context.close(promise: nil) }

    func closeOutput() {
        let context = self.context!
        let closed = context.eventLoop.makePromise(of: Void.self)
        context.close(mode: .output, promise: closed)
        closed.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
    }

    func whenWritten(_ body: @escaping () -> Void) {
        // Writes complete in order: an empty write after them completes after them.
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)))
            .assumeIsolated().whenComplete { _ in body() }
    }

    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> any TransportTimer {
        context.eventLoop.assumeIsolated().scheduleTask(in: delay, body)
    }

    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        to body: @escaping (TokenEngine.Outcome) -> Void
    ) -> Task<Void, Never> {
        let promise = context.eventLoop.makePromise(of: TokenEngine.Outcome.self)
        let task = promise.completeWithTask { await wait() }
        promise.futureResult.assumeIsolated().whenSuccess(body)
        return task
    }

    var socketDescriptor: Int32? { nil }

    /// It has no socket of its own (``socketDescriptor`` is `nil`), so nothing waits for one:
    /// `body` runs at once.
    func whenSocketWritable(_ body: @escaping () -> Void) {
        context.eventLoop.assumeIsolated().execute(body)
    }

    func continueLater(_ body: @escaping () -> Void) {
        context.eventLoop.assumeIsolated().execute(body)
    }
}
