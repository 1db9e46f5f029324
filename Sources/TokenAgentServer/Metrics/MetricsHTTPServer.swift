import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization
import TokenAgent

/// The optional HTTP listener for a Prometheus scrape (`metrics_listen`): `GET /metrics` answers
/// the same exposition as the `METRICS` verb (without the socket's `# EOF` line). There is no
/// access control: whoever can reach the address can read the metrics, which is why it is off by
/// default and meant for the loopback address.
///
/// Bounded whatever its peers do (``Limits``): it runs on a thread of its own, so scrapes never
/// hold up the socket's event loops; an exposition is rendered at most once a second, however many
/// scrapers ask; one request per connection (then `Connection: close`), at most `maxRequestBytes`
/// read from a connection, and a connection that makes no progress for `idleTimeout` is closed.
/// A request's head must have come whole within `headTimeout` of the connection (a peer that
/// trickles its request a byte at a time is closed then, however steadily it trickles). At most
/// `maxConnections` are open at once: a new connection past them closes the oldest one still
/// waiting for its request's head to make room, and is itself closed only when every open
/// connection is being answered, so trickling peers never keep a scraper out.
///
/// Requests follow RFC 9112 and 9110: the target may be in origin form (`/metrics`) or in
/// absolute form (`http://host:port/metrics`, served as its path), and `HEAD` answers the headers
/// `GET` would, `Content-Length` included, without the body.
public final class MetricsHTTPServer: Service, Sendable {
    /// What the listener may cost.
    public struct Limits: Sendable {
        /// Connections at once; past them a new connection closes the oldest one still waiting
        /// for its request's head, or is closed itself when every one is being answered.
        public var maxConnections = 16
        /// Bytes read from one connection (its one request); past it the connection is closed.
        public var maxRequestBytes = 16 * 1024
        /// A connection with no read or write for this long is closed.
        public var idleTimeout: TimeAmount = .seconds(10)
        /// A connection whose request's head has not come whole this long after it was accepted
        /// is closed (`metrics_head_timeout`).
        public var headTimeout: TimeAmount = .seconds(5)
        /// How long a rendered exposition is served again.
        public var renderInterval: TimeAmount = .seconds(1)

        /// The default limits.
        public init() {}
    }

    private let address: MetricsListenAddress
    private let status: AgentStatus
    private let logger: Logger
    private let limits: Limits
    private let onListening: @Sendable () -> Void

    /// A listener on `address` for `status`'s metrics, calling `onListening` once it listens.
    public init(
        address: MetricsListenAddress,
        status: AgentStatus,
        logger: Logger,
        limits: Limits = Limits(),
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.address = address
        self.status = status
        self.logger = logger
        self.limits = limits
        self.onListening = onListening
    }

    public func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            try await serve(on: group)
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
        try? await group.shutdownGracefully()
    }

    private func serve(on group: MultiThreadedEventLoopGroup) async throws {
        let exposition = RenderedExposition(status: status, interval: limits.renderInterval)
        let gate = HTTPConnectionGate()
        let limits = self.limits
        let logger = self.logger
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 64 * 1024))
            .childChannelInitializer { channel in
                guard let admitted = gate.admit(channel, limit: limits.maxConnections) else {
                    logger.debug("metrics connection refused: every connection is being answered")
                    return channel.close()
                }
                if let evicted = admitted.evicted {
                    logger.debug("metrics connection closed to make room: it had not sent its request")
                    evicted.close(promise: nil)
                }
                let number = admitted.number
                channel.closeFuture.whenComplete { _ in gate.release(number) }
                do {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(InboundByteLimit(limit: limits.maxRequestBytes))
                    try sync.addHandler(IdleStateHandler(allTimeout: limits.idleTimeout))
                    try sync.addHandler(IdleCloser())
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: false)
                    try sync.addHandler(
                        MetricsHTTPHandler(exposition: exposition, headTimeout: limits.headTimeout) {
                            gate.setAnswering(number, true)
                        }
                    )
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(host: address.host, port: address.port).get()
        } catch {
            throw ListenError(key: "metrics_listen", address: "\(address)", error: error)
        }
        var metadata: Logger.Metadata = ["address": "\(address)"]
        if !address.isLoopback {
            metadata["warning"] = "not a loopback address: anyone who can reach it can read the metrics"
        }
        logger.info("serving metrics over HTTP", metadata: metadata)
        onListening()
        try? await gracefulShutdown()
        try? await channel.close()
    }
}

/// The exposition, rendered at most once an interval however many scrapers ask.
final class RenderedExposition: Sendable {
    private let status: AgentStatus
    private let interval: TimeAmount
    private let rendered = Mutex<(at: NIODeadline, bytes: [UInt8])?>(nil)

    init(status: AgentStatus, interval: TimeAmount) {
        self.status = status
        self.interval = interval
    }

    /// The latest exposition, rendered now if the last one is older than the interval.
    func current() -> [UInt8] {
        rendered.withLock { rendered in
            let now = NIODeadline.now()
            if let last = rendered, now < last.at + interval { return last.bytes }
            let bytes = status.metrics.exposition(of: status)
            rendered = (now, bytes)
            return bytes
        }
    }
}

/// Closes the connection once more than `limit` bytes have come from the peer.
private final class InboundByteLimit: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private let limit: Int
    private var received = 0

    init(limit: Int) { self.limit = limit }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        received += unwrapInboundIn(data).readableBytes
        guard received <= limit else {
            context.close(promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
}

/// Closes a connection the idle-state handler reports idle (the metrics and metadata listeners).
final class IdleCloser: ChannelInboundHandler {
    typealias InboundIn = NIOAny

    private let onIdle: () -> Void

    /// `onIdle` is called when the idle-state handler's report closes the connection.
    init(onIdle: @escaping () -> Void = {}) { self.onIdle = onIdle }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            if context.channel.isActive { onIdle() }
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}

/// Answers one request per connection, `GET /metrics` (and `GET /`) with the exposition and
/// anything else with 404 or 405, then closes; what else the peer sends is dropped (and bounded
/// by ``InboundByteLimit``). A connection whose request's head has not come within `headTimeout`
/// is closed.
final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exposition: RenderedExposition
    private let headTimeout: TimeAmount
    private let onHead: () -> Void
    private var answered = false
    private var headDeadline: Scheduled<Void>?

    init(exposition: RenderedExposition, headTimeout: TimeAmount, onHead: @escaping () -> Void) {
        self.exposition = exposition
        self.headTimeout = headTimeout
        self.onHead = onHead
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        headDeadline = context.eventLoop.scheduleTask(in: headTimeout) { channel.close(promise: nil) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        headDeadline?.cancel()
    }

    /// The path of a request target: an origin-form target (`/metrics?x`) without its query,
    /// and an absolute-form one (`http://host:port/metrics`, RFC 9112 section 3.2.2) as the path
    /// it names (`/` for none).
    static func path(of target: String) -> Substring {
        var rest = Substring(target)
        if !rest.hasPrefix("/"), let separator = rest.firstRange(of: "://") {
            let scheme = rest[..<separator.lowerBound]
            if !scheme.isEmpty, scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
            {
                let authorityAndPath = rest[separator.upperBound...]
                let pathStart = authorityAndPath.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" }
                rest = pathStart.map { authorityAndPath[$0...] } ?? ""
            }
        }
        let path = rest.prefix { $0 != "?" && $0 != "#" }
        return path.isEmpty ? "/" : path
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data), !answered else { return }
        answered = true
        headDeadline?.cancel()
        onHead()
        let path = Self.path(of: head.uri)
        var headers = HTTPHeaders()
        let code: HTTPResponseStatus
        var body = context.channel.allocator.buffer(capacity: 0)
        if head.method != .GET && head.method != .HEAD {
            code = .methodNotAllowed
            headers.add(name: "Allow", value: "GET, HEAD")
            body.writeString("only GET\n")
        } else if path == "/metrics" || path == "/" {
            code = .ok
            headers.add(name: "Content-Type", value: "text/plain; version=0.0.4; charset=utf-8")
            body.writeBytes(exposition.current())
        } else {
            code = .notFound
            body.writeString("not found; the metrics are at /metrics\n")
        }
        // HEAD: the headers GET would get, its Content-Length included, and no body (RFC 9110
        // section 9.3.2).
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        headers.add(name: "Connection", value: "close")
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: code, headers: headers))),
            promise: nil
        )
        if head.method != .HEAD, body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}
