import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import TokenAgent

/// The optional HTTP listener for a Prometheus scrape (`metrics_listen`): `GET /metrics` answers
/// the same exposition as the `METRICS` verb (without the socket's `# EOF` line). There is no
/// access control: whoever can reach the address can read the metrics, which is why it is off by
/// default and meant for the loopback address.
public final class MetricsHTTPServer: Service, Sendable {
    private let address: MetricsListenAddress
    private let status: AgentStatus
    private let logger: Logger
    private let group: any EventLoopGroup

    /// A listener on `address` for `status`'s metrics.
    public init(
        address: MetricsListenAddress,
        status: AgentStatus,
        logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) {
        self.address = address
        self.status = status
        self.logger = logger
        self.group = group
    }

    public func run() async throws {
        let status = self.status
        let channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMapThrowing {
                    try channel.pipeline.syncOperations.addHandler(MetricsHTTPHandler(status: status))
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

/// Answers `GET /metrics` (and `GET /`) with the exposition; anything else with 404 or 405.
private final class MetricsHTTPHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let status: AgentStatus

    init(status: AgentStatus) { self.status = status }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else { return }
        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? "/"
        let keepAlive = head.isKeepAlive
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
            if head.method == .GET { body.writeBytes(status.metrics.exposition(of: status)) }
        } else {
            code = .notFound
            body.writeString("not found; the metrics are at /metrics\n")
        }
        headers.add(name: "Content-Length", value: "\(body.readableBytes)")
        headers.add(name: "Connection", value: keepAlive ? "keep-alive" : "close")
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: code, headers: headers))),
            promise: nil
        )
        if body.readableBytes > 0 { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        if !keepAlive { done.assumeIsolated().whenComplete { _ in context.close(promise: nil) } }
    }
}
