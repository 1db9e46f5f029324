import Logging
import MetadataEndpoint
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The GCE metadata endpoint (`metadata_server`): HTTP on a loopback address answering the paths
/// Google's auth libraries call for a service account's token (``MetadataRouter``), for the
/// users the kernel says own the connecting sockets (``MetadataPeerResolver``).
///
/// Bounded whatever its peers do (``Limits``), as the metrics listener is: it runs on an event
/// loop thread of its own, with one more thread for the peer lookups, so it never holds up the
/// agent's socket. At most `maxRequestBytes` are read for each request; a request's head must
/// have come whole within `headTimeout` of the connection or of the answer before it (keep-alive,
/// as google-auth's sessions use it, up to `maxRequestsPerConnection`), and the whole request
/// within `requestTimeout` of its first byte; a connection with no read or write for
/// `idleTimeout` is closed. At most `maxConnections` are open at once: a new one past them closes
/// a waiting one (no whole request in; of a peer no entry allows first, the oldest first; see
/// ``HTTPConnectionGate``), and is itself closed only when every open connection is being
/// answered. Each peer is looked up when its connection is accepted. Refusals are logged at most
/// twice an interval a peer (``RefusalLog``); each peer's answers are paced to
/// `answersPerSecond` past a burst (``PeerPacer``).
///
/// `run()` serves until its task is cancelled or, as a swift-service-lifecycle `Service` in the
/// agent's group, until the graceful shutdown; then it closes the listener and every connection.
/// ``reconfigure(defaultEntry:projectID:tokens:)`` swaps what it serves (a reload); the address
/// it listens on is fixed for its life.
public final class MetadataHTTPServer: Service, Sendable {
    /// What the endpoint may cost.
    public struct Limits: Sendable {
        /// Connections at once; past them a new connection closes the oldest one waiting for a
        /// request, or is closed itself when every one is being answered.
        public var maxConnections = 64
        /// Bytes read for one request (head and any body); past it the connection is closed.
        public var maxRequestBytes = 16 * 1024
        /// Requests on one connection; the last is answered with `Connection: close`.
        public var maxRequestsPerConnection = 100
        /// A connection with no read or write for this long is closed (a token fetch included).
        public var idleTimeout: TimeAmount = .seconds(30)
        /// A request's head must come whole this long after the connection or the answer before.
        public var headTimeout: TimeAmount = .seconds(10)
        /// A request must come whole this long after its first byte (`metadata_server.request_timeout`).
        public var requestTimeout: TimeAmount = .seconds(10)
        /// A peer's refusals past its first in this long are one summary line (``RefusalLog``).
        public var refusalLogInterval: TimeAmount = .seconds(10)
        /// Answers written at once a second a peer (uid), past a burst of as many; the others
        /// wait their turn (``PeerPacer``).
        public var answersPerSecond = 500

        /// The default limits.
        public init() {}
    }

    private let configuration: MetadataServerConfiguration
    private let holder: RouterHolder
    private let resolver: any MetadataPeerResolver
    private let logger: Logger
    private let limits: Limits
    private let listening = ListeningAddress()
    /// What it answered and what became of its connections (`STATS`, the metrics).
    public let statistics: MetadataStatistics

    private let onListening: @Sendable () -> Void

    /// An endpoint for `configuration` serving `tokens`' entries to the peers `resolver` names,
    /// calling `onListening` once it listens.
    public init(
        configuration: MetadataServerConfiguration,
        tokens: any MetadataTokenSource,
        resolver: any MetadataPeerResolver = KernelPeerResolver(),
        logger: Logger,
        limits: Limits = Limits(),
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.onListening = onListening
        self.configuration = configuration
        self.holder = RouterHolder(configuration: configuration, tokens: tokens)
        self.resolver = resolver
        self.logger = logger
        self.limits = limits
        self.statistics = MetadataStatistics(listen: configuration.listen)
    }

    /// The address listened on, once listening: the configured one, with the port the system
    /// chose when it was 0.
    public func listeningAddress() async throws -> MetadataListenAddress {
        try await listening.wait()
    }

    /// Serves `tokens`' entries from now on, with `defaultEntry` as `default` and `projectID` as
    /// the project: a reload. Each request is answered by one router, the old or the new.
    public func reconfigure(defaultEntry: String, projectID: String?, tokens: any MetadataTokenSource) {
        holder.reconfigure(defaultEntry: defaultEntry, projectID: projectID, tokens: tokens)
    }

    /// Listens and serves until the task is cancelled or the graceful shutdown.
    public func run() async throws {
        try await cancelWhenGracefulShutdown { try await self.listenAndServe() }
    }

    private func listenAndServe() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let threadPool = NIOThreadPool(numberOfThreads: 1)
        threadPool.start()
        do {
            try await serve(on: group, threadPool: threadPool)
        } catch {
            listening.fail(error)
            try? await threadPool.shutdownGracefully()
            try? await group.shutdownGracefully()
            throw error
        }
        try? await threadPool.shutdownGracefully()
        try? await group.shutdownGracefully()
    }

    private func serve(on group: MultiThreadedEventLoopGroup, threadPool: NIOThreadPool) async throws {
        let connections = HTTPConnectionGate()
        let limits = self.limits
        let logger = self.logger
        let statistics = self.statistics
        let refusals = RefusalLog(interval: limits.refusalLogInterval, logger: logger, eventLoop: group.next())
        let settings = MetadataHTTPHandler.Settings(
            router: holder,
            resolver: resolver,
            threadPool: threadPool,
            headTimeout: limits.headTimeout,
            maxRequests: limits.maxRequestsPerConnection,
            logger: logger,
            statistics: statistics,
            refusals: refusals,
            pacer: PeerPacer(rate: limits.answersPerSecond)
        )
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 64 * 1024))
            // A client that shuts its sending side after its request (socat, `nc -N`) still gets the
            // answer, then the close (MetadataHTTPHandler).
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelInitializer { channel in
                guard let admitted = connections.admit(channel, limit: limits.maxConnections) else {
                    logger.debug("metadata connection refused: every connection is being answered")
                    statistics.countRefused()
                    return channel.close()
                }
                statistics.countAdmitted()
                if let evicted = admitted.evicted {
                    logger.debug("metadata connection closed to make room: no whole request had come on it")
                    statistics.countClosed(.evicted)
                    evicted.close(promise: nil)
                }
                let number = admitted.number
                channel.closeFuture.whenComplete { _ in
                    connections.release(number)
                    statistics.countReleased()
                }
                do {
                    let sync = channel.pipeline.syncOperations
                    let byteLimit = RequestByteLimit(
                        limit: limits.maxRequestBytes,
                        deadline: limits.requestTimeout,
                        onExceeded: { statistics.countClosed(.tooLarge) },
                        onDeadline: { statistics.countClosed(.requestTimeout) }
                    )
                    try sync.addHandler(byteLimit)
                    try sync.addHandler(IdleStateHandler(allTimeout: limits.idleTimeout))
                    try sync.addHandler(IdleCloser { statistics.countClosed(.idleTimeout) })
                    try sync.configureHTTPServerPipeline(withPipeliningAssistance: true, withErrorHandling: true)
                    try sync.addHandler(
                        MetadataHTTPHandler(
                            settings: settings,
                            byteLimit: byteLimit,
                            setAnswering: { connections.setAnswering(number, $0) },
                            setStanding: { connections.setStanding(number, $0) }
                        )
                    )
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
        let channel: any Channel
        do {
            channel = try await bootstrap.bind(host: configuration.listen.host, port: Int(configuration.listen.port))
                .get()
        } catch {
            throw ListenError(key: "metadata_server.listen", address: "\(configuration.listen)", error: error)
        }
        let port = channel.localAddress?.port.map { UInt16(truncatingIfNeeded: $0) } ?? configuration.listen.port
        let bound = configuration.listen.withPort(port)
        holder.bind(bound)
        statistics.bound(bound)
        listening.set(bound)
        logger.info(
            "serving the GCE metadata endpoint",
            metadata: ["address": "\(bound)", "default": "\(configuration.defaultEntry)"]
        )
        onListening()
        try await withTaskCancellationHandler {
            try await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
    }
}
