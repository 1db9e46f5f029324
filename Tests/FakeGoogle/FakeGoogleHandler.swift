import NIOCore
import NIOHTTP1

/// Collects each request (body at most 1 MiB), asks the fake for its reply, and sends it after
/// the reply's delay (or closes the connection for a dropped one).
final class FakeGoogleHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    static let maxBodyBytes = 1024 * 1024

    private let fake: () -> FakeGoogle
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var tooLarge = false

    init(fake: @escaping () -> FakeGoogle) { self.fake = fake }

    func channelActive(context: ChannelHandlerContext) {
        fake().state.withLock { $0.openConnections += 1 }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        fake().state.withLock { $0.openConnections -= 1 }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body = []
            tooLarge = false
        case .body(let buffer):
            if body.count + buffer.readableBytes > Self.maxBodyBytes {
                tooLarge = true
            } else {
                body += buffer.readableBytesView
            }
        case .end:
            guard let head else { return }
            self.head = nil
            let reply =
                tooLarge
                ? FakeReply.text(413, "Request Entity Too Large")
                : fake().reply(to: FakeRequest(method: head.method, uri: head.uri, headers: head.headers, body: body))
            if reply.hang { return }
            if reply.drop {
                context.close(promise: nil)
                return
            }
            let keepAlive = head.isKeepAlive
            if let interval = reply.dripMilliseconds {
                drip(reply, every: interval, context: context)
                return
            }
            if reply.held {
                let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
                let eventLoop = context.eventLoop
                fake().park {
                    eventLoop.execute {
                        let (handler, context) = bound.value
                        handler.send(reply, keepAlive: keepAlive, context: context)
                    }
                }
                return
            }
            if reply.delayMicroseconds <= 0 {
                send(reply, keepAlive: keepAlive, context: context)
                return
            }
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .microseconds(Int64(reply.delayMicroseconds))) {
                let (handler, context) = bound.value
                handler.send(reply, keepAlive: keepAlive, context: context)
            }
        }
    }

    /// Sends the head of `reply` now and its body one byte every `interval` milliseconds, until
    /// the body is sent or the connection closes.
    private func drip(_ reply: FakeReply, every interval: Int, context: ChannelHandlerContext) {
        var headers = HTTPHeaders([("Content-Length", "\(reply.body.count)")])
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        let status = HTTPResponseStatus(statusCode: reply.status)
        context.writeAndFlush(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
            promise: nil
        )
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        Self.drip(reply.body, from: 0, every: interval, bound: bound, on: context.eventLoop)
    }

    /// Sends byte `sent` of `body` after `interval` milliseconds, and the next after it.
    private static func drip(
        _ body: [UInt8],
        from sent: Int,
        every interval: Int,
        bound: NIOLoopBound<(FakeGoogleHandler, ChannelHandlerContext)>,
        on eventLoop: any EventLoop
    ) {
        eventLoop.scheduleTask(in: .milliseconds(Int64(interval))) {
            let (handler, context) = bound.value
            guard context.channel.isActive, sent < body.count else { return }
            let byte = context.channel.allocator.buffer(bytes: body[sent..<sent + 1])
            context.writeAndFlush(handler.wrapOutboundOut(.body(.byteBuffer(byte))), promise: nil)
            if sent + 1 < body.count {
                drip(body, from: sent + 1, every: interval, bound: bound, on: eventLoop)
            } else {
                context.writeAndFlush(handler.wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }

    private func send(_ reply: FakeReply, keepAlive: Bool, context: ChannelHandlerContext) {
        var headers = HTTPHeaders([("Content-Length", "\(reply.body.count)")])
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        let status = HTTPResponseStatus(statusCode: reply.status)
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))),
            promise: nil
        )
        context.write(
            wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: reply.body)))),
            promise: nil
        )
        let closing = keepAlive ? nil : context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in closing?.close(promise: nil) }
    }
}
