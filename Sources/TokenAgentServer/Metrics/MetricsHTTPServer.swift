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
/// Bounded whatever its peers do (``Limits``): it runs on a thread of its own, so scrapes never hold up the socket's event loops; an exposition is
/// rendered at most once a second, however many scrapers ask; one request per connection (then
/// `Connection: close`), at most `maxRequestBytes` read from a connection, at most
/// `maxConnections` at once (more are closed at once), and a connection that makes no progress
/// for `idleTimeout` is closed.
public final class MetricsHTTPServer: Service, Sendable {
    /// What the listener may cost.
    public struct Limits: Sendable {
        /// Connections at once; more are closed as soon as they are accepted.
        public var maxConnections = 16
        /// Bytes read from one connection (its one request); past it the connection is closed.
        public var maxRequestBytes = 16 * 1024
        /// A connection with no read or write for this long is closed.
        public var idleTimeout: TimeAmount = .seconds(10)
        /// How long a rendered exposition is served again.
        public var renderInterval: TimeAmount = .seconds(1)

        /// The default limits.
        public init() {}
    }

    private let address: MetricsListenAddress
    private let status: AgentStatus
    private let logger: Logger
    private let limits: Limits

    /// A listener on `address` for `status`'s metrics.
    public init(address: MetricsListenAddress, status: AgentStatus, logger: Logger, limits: Limits = Limits()) {
        self.address = address
        self.status = status
        self.logger = logger
        self.limits = limits
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
        let gate = ConnectionCount()
        let limits = self.limits
        let logger = self.logger
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 64 * 1024))
            .childChannelInitializer { channel in
                guard gate.admit(limit: limits.maxConnections) else {
                    logger.debug("metrics connection refused: too many connections")
                    return channel.close()
                }
                channel.closeFuture.whenComplete { _ in gate.release() }
                do {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(InboundByteLimit(limit: limits.maxRequestBytes))
                    try sync.addHandler(IdleStateHandler(allTimeout: limits.idleTimeout))
                    try sync.addHandler(IdleCloser())
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: false)
                    try sync.addHandler(MetricsHTTPHandler(exposition: exposition))
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
            .bind(host: address.host, port: address.port).get()
        var metadata: Logger.Metadata = ["address": "\(address)"]
        if !address.isLoopback {
            metadata["warning"] = "not a loopback address: anyone who can reach it can read the metrics"
        }
        logger.info("serving metrics over HTTP", metadata: metadata)
        try? await gracefulShutdown()
        try? await channel.close()
    }
}

/// The number of open metrics connections, against the limit.
private final class ConnectionCount: Sendable {
    private let open = Atomic<Int>(0)

    func admit(limit: Int) -> Bool {
        if open.wrappingAdd(1, ordering: .relaxed).newValue <= limit { return true }
        open.wrappingSubtract(1, ordering: .relaxed)
        return false
    }

    func release() { open.wrappingSubtract(1, ordering: .relaxed) }
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

/// Closes a connection the idle-state handler reports idle.
private final class IdleCloser: ChannelInboundHandler {
    typealias InboundIn = NIOAny

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }
}

/// Answers one request per connection, `GET /metrics` (and `GET /`) with the exposition and
/// anything else with 404 or 405, then closes; what else the peer sends is dropped (and bounded
/// by ``InboundByteLimit``).
private final class MetricsHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let exposition: RenderedExposition
    private var answered = false

    init(exposition: RenderedExposition) { self.exposition = exposition }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data), !answered else { return }
        answered = true
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/"
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
            if head.method == .GET { body.writeBytes(exposition.current()) }
        } else {
            code = .notFound
            body.writeString("not found; the metrics are at /metrics\n")
        }
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        headers.add(name: "Connection", value: "close")
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: code, headers: headers))),
            promise: nil
        )
        if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            context.close(promise: nil)
        }
    }
}
