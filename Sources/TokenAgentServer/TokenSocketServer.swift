import CSharedMemory
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import TokenAgent
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Settings of the socket server.
public struct SocketServerConfiguration: Sendable {
    /// The socket path to bind.
    public var path: String
    /// The socket file's mode (default `0660`), set before the socket listens.
    public var mode: UInt32 = 0o660
    /// The group that owns the socket file, if not the process's own.
    public var group: String?
    /// Listening sockets passed by the service manager (socket activation). When any is given,
    /// they are adopted as they are and ``path`` is neither bound nor removed.
    public var adoptedDescriptors: [Int32] = []
    /// The most client connections at once; further ones get `ERR busy` and are closed.
    public var maxConnections = 1024
    /// The most connections one uid may hold at once; 0 for no per-uid limit.
    public var maxConnectionsPerUID = 0
    /// How long a partial request line may wait for its end while the agent reads.
    public var requestTimeout: TimeAmount = .seconds(10)
    /// How long a client may leave its replies unread (the agent's output for it full) before
    /// the connection is closed.
    public var stallTimeout: TimeAmount = .seconds(30)
    /// How long a graceful shutdown waits for connections to finish their replies.
    public var drainTimeout: TimeAmount = .seconds(5)

    /// Creates settings for `path`.
    public init(path: String) { self.path = path }
}

/// The Unix socket server, as a service: binds, serves until graceful shutdown, then stops
/// accepting, lets every connection finish the replies it owes (bounded), and removes its socket.
public final class TokenSocketServer: Service, Sendable {
    private let configuration: SocketServerConfiguration
    private let engine: TokenEngine
    private let status: AgentStatus
    private let logger: Logger
    private let group: any EventLoopGroup
    private let onListening: @Sendable () -> Void
    private let connections = Mutex<[ObjectIdentifier: any Channel]>([:])

    /// Creates a server for `engine`. `onListening` runs once the socket accepts connections.
    public init(
        configuration: SocketServerConfiguration,
        engine: TokenEngine,
        status: AgentStatus,
        logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.configuration = configuration
        self.engine = engine
        self.status = status
        self.logger = logger
        self.group = group
        self.onListening = onListening
    }

    /// The listen backlog: as deep as the socket unit's `Backlog=`.
    static let backlog: Int32 = 1024

    public func run() async throws {
        let channels = try await openListeners()
        onListening()

        try? await gracefulShutdown()
        logger.info("shutting down: no new connections, finishing replies")
        for channel in channels { try? await channel.close() }
        if configuration.adoptedDescriptors.isEmpty { unlink(configuration.path) }
        await drainConnections()
    }

    /// Adopts the passed sockets, or binds the configured path.
    private func openListeners() async throws -> [any Channel] {
        if !configuration.adoptedDescriptors.isEmpty {
            var channels: [any Channel] = []
            for descriptor in configuration.adoptedDescriptors {
                channels.append(try await bootstrap().withBoundSocket(descriptor).get())
                // Adopting listens again with SwiftNIO's default backlog (128); restore the deep
                // queue the socket unit asks for, so connections made during a restart wait.
                listen(descriptor, Self.backlog)
                logger.info("listening on a socket passed by systemd", metadata: ["fd": "\(descriptor)"])
            }
            return channels
        }
        let path = configuration.path
        try SocketPath.prepare(path)
        let previousMask = umask(mode_t(~configuration.mode & 0o777))
        let channel: any Channel
        do {
            channel = try await bootstrap().bind(unixDomainSocketPath: path).get()
            umask(previousMask)
        } catch {
            umask(previousMask)
            throw SocketPath.Problem(description: "cannot listen on \(path): \(error)")
        }
        var groupID: gid_t?
        if let group = configuration.group {
            // A number is a gid as it is: an image's /etc/group need not know the workers' group.
            if let number = gid_t(group) {
                groupID = number
            } else if let entry = getgrnam(group) {
                groupID = entry.pointee.gr_gid
            } else {
                try? await channel.close()
                unlink(path)
                throw SocketPath.Problem(description: "socket group \(group) does not exist")
            }
        }
        do {
            let mode = mode_t(configuration.mode)
            if let failure = try SocketPath.setModeAndGroup(of: path, mode: mode, group: groupID) {
                logger.warning(
                    "cannot give the socket to its group",
                    metadata: ["group": "\(configuration.group ?? "")", "error": "\(failure)"]
                )
            }
        } catch {
            // Whatever is at the path now is not the socket bound here: leave it alone.
            try? await channel.close()
            throw error
        }
        logger.info("listening", metadata: ["socket": "\(path)"])
        return [channel]
    }

    private func bootstrap() -> ServerBootstrap {
        let engine = self.engine
        let status = self.status
        let logger = self.logger
        let limit = configuration.maxConnections
        let perUIDLimit = configuration.maxConnectionsPerUID
        let requestTimeout = configuration.requestTimeout
        let stallTimeout = configuration.stallTimeout
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: Self.backlog)
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 32 * 1024, high: 64 * 1024))
            // Reads of at most 16 KiB, four a burst: what a connection reads before it must stop
            // (its owed replies or unread output at their bounds) is at most 64 KiB.
            .childChannelOption(
                .recvAllocator,
                value: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 2048, maximum: 16 * 1024)
            )
            .childChannelOption(.maxMessagesPerRead, value: 4)
            .childChannelInitializer { [self] channel in
                PeerCredentialsReader.read(channel).flatMapThrowing { peer in
                    let admission = status.server.admit(limit: limit, uid: peer?.uid, perUIDLimit: perUIDLimit)
                    switch admission {
                    case .admitted:
                        self.track(channel, uid: peer?.uid)
                    case .tooManyConnections:
                        logger.warning("connection refused: too many connections", metadata: ["limit": "\(limit)"])
                    case .tooManyForUID(let uid):
                        logger.warning(
                            "connection refused: too many connections for one uid",
                            metadata: PeerCredentials.logMetadata(peer).merging(
                                ["peer_uid": "\(uid)", "limit": "\(perUIDLimit)"],
                                uniquingKeysWith: { $1 }
                            )
                        )
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        RequestHandler(
                            engine: engine,
                            status: status,
                            logger: logger,
                            admission: admission,
                            peer: peer,
                            requestTimeout: requestTimeout,
                            stallTimeout: stallTimeout
                        )
                    )
                }
            }
    }

    /// Adds the handler that serves one client connection (it frames its own input) to
    /// `channel`, as the server does for each connection it accepts, with no peer credentials. For
    /// benchmarks and tests that drive the real pipeline on an `EmbeddedChannel`; call it on the
    /// channel's event loop.
    public static func addConnectionHandlers(
        to channel: any Channel,
        engine: TokenEngine,
        status: AgentStatus,
        logger: Logger
    ) throws {
        try channel.pipeline.syncOperations.addHandler(RequestHandler(engine: engine, status: status, logger: logger))
    }

    private func track(_ channel: any Channel, uid: UInt32?) {
        let id = ObjectIdentifier(channel)
        connections.withLock { $0[id] = channel }
        let status = self.status
        channel.closeFuture.whenComplete { [self] _ in
            status.server.release(uid: uid)
            connections.withLock { _ = $0.removeValue(forKey: id) }
            giveMemoryBack(after: channel)
        }
    }

    /// Connections closed since the allocator was last asked to give freed memory back.
    private let closedSinceTrim = Mutex(0)

    /// Every 256 closed connections, asks the allocator (a second later, on the event loop the
    /// last one used) to return the memory they freed to the system: glibc keeps freed memory in
    /// its arenas otherwise, so a burst of connections that hit their bounds would leave the
    /// agent that much larger for good.
    private func giveMemoryBack(after channel: any Channel) {
        let due = closedSinceTrim.withLock { closed -> Bool in
            closed += 1
            guard closed >= 256 else { return false }
            closed = 0
            return true
        }
        if due { channel.eventLoop.scheduleTask(in: .seconds(1)) { _ = fsm_return_free_memory() } }
    }

    private func drainConnections() async {
        let open = connections.withLock { Array($0.values) }
        for channel in open { channel.pipeline.fireUserInboundEventTriggered(QuiesceEvent()) }
        let deadline = NIODeadline.now() + configuration.drainTimeout
        for channel in open {
            let remaining = deadline - .now()
            if remaining > .zero {
                let timeout = channel.eventLoop.scheduleTask(in: remaining) { channel.close(promise: nil) }
                try? await channel.closeFuture.get()
                timeout.cancel()
            } else {
                try? await channel.close()
            }
        }
    }
}
