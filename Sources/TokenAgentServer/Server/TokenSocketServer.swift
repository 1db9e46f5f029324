import CSharedMemory
import CSocketLoop
import Logging
import NIOCore
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
/// Its connections are served by one ``SocketLoop`` thread.
public final class TokenSocketServer: Service, Sendable {
    private let configuration: SocketServerConfiguration
    private let status: AgentStatus
    /// What each connection works with.
    private let connectionContext: ConnectionContext
    private let logger: Logger
    private let onListening: @Sendable () -> Void
    /// The loop while it runs (and after it ended on its own), for ``socketLoopAnswers(within:)``.
    let runningLoop = Mutex<SocketLoop?>(nil)

    /// Creates a server for `engine`. `onListening` runs once the socket accepts connections.
    public init(
        configuration: SocketServerConfiguration,
        engine: TokenEngine,
        status: AgentStatus,
        logger: Logger,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.configuration = configuration
        self.status = status
        self.connectionContext = ConnectionContext(engine: engine, status: status)
        self.logger = logger
        self.onListening = onListening
    }

    /// The listen backlog: as deep as the socket unit's `Backlog=`.
    static let backlog: Int32 = 1024

    public func run() async throws {
        let sockets = try openListeners()
        let loop: SocketLoop
        do {
            loop = try SocketLoop(logger: logger)
        } catch {
            for socket in sockets { close(socket) }
            throw error
        }
        let accepting = Acceptor(server: self, loop: loop)
        loop.start(name: Self.threadName)
        runningLoop.withLock { $0 = loop }
        loop.execute {
            for socket in sockets { loop.addListener(socket) { accepting.accept($0) } }
        }
        onListening()

        // Serves until graceful shutdown, unless the loop ends first: then nothing serves, and
        // the service fails, so the agent exits and its supervisor starts it again.
        if let failure = await Self.shutdownOrEnd(of: loop) {
            // The ended loop stays, so the watchdog's probe fails until the agent has exited.
            if configuration.adoptedDescriptors.isEmpty { unlink(configuration.path) }
            throw SocketPath.Problem(description: "the socket loop ended: \(failure)")
        }
        logger.info("shutting down: no new connections, finishing replies")
        await onLoop(loop) { for socket in loop.listenerSockets { loop.closeListener(socket) } }
        if configuration.adoptedDescriptors.isEmpty { unlink(configuration.path) }
        await drainConnections(loop)
        runningLoop.withLock { $0 = nil }
        await loop.stop()
    }

    /// The serving thread's name, as `top -H`, perf and crash reports show it (Linux keeps 15
    /// bytes).
    static let threadName = "tokend-socket"

    /// Waits for graceful shutdown (`nil`) or for `loop` to end on its own (why).
    private static func shutdownOrEnd(of loop: SocketLoop) async -> String? {
        await withTaskGroup(of: String?.self) { group in
            group.addTask {
                try? await gracefulShutdown()
                return nil
            }
            group.addTask {
                // Only a loop that failed ends before graceful shutdown stops it; cancelled
                // (graceful shutdown came first), this returns `nil`.
                await loop.ended()
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// Whether the socket loop runs a task within `seconds` (true when it is not running): the
    /// watchdog's check that the loop serving every connection is not stuck.
    public func socketLoopAnswers(within seconds: Double = 10) async -> Bool {
        guard let loop = runningLoop.withLock({ $0 }) else { return true }
        return await loop.answers(within: seconds)
    }

    /// Binds the configured path, or takes the sockets passed by the service manager: the
    /// listening sockets, non-blocking.
    private func openListeners() throws -> [Int32] {
        if !configuration.adoptedDescriptors.isEmpty {
            for descriptor in configuration.adoptedDescriptors {
                _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
                _ = fcntl(descriptor, F_SETFD, fcntl(descriptor, F_GETFD) | FD_CLOEXEC)
                // As deep a queue as the socket unit asks for, so connections made during a
                // restart wait.
                listen(descriptor, Self.backlog)
                logger.info("listening on a socket passed by systemd", metadata: ["fd": "\(descriptor)"])
            }
            return configuration.adoptedDescriptors
        }
        let path = configuration.path
        try SocketPath.prepare(path)
        let socket = try bindSocket(path)
        var groupID: gid_t?
        if let group = configuration.group {
            // A number is a gid as it is: an image's /etc/group need not know the workers' group.
            if let number = gid_t(group) {
                groupID = number
            } else if let entry = getgrnam(group) {
                groupID = entry.pointee.gr_gid
            } else {
                close(socket)
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
            close(socket)
            throw error
        }
        logger.info("listening", metadata: ["socket": "\(path)"])
        return [socket]
    }

    /// A listening socket bound at `path`, its file made with the configured mode (through the
    /// umask, so it is never more open than that, even for a moment).
    private func bindSocket(_ path: String) throws -> Int32 {
        let socket = Glibc.socket(
            AF_UNIX,
            Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue | SOCK_CLOEXEC.rawValue),
            0
        )
        guard socket >= 0 else {
            throw SocketPath.Problem(description: "cannot listen on \(path): \(String(cString: strerror(errno)))")
        }
        let previousMask = umask(mode_t(~configuration.mode & 0o777))
        let bound = UnixSocketAddress.with(path: path) { bind(socket, $0, $1) == 0 ? 0 : errno } ?? ENAMETOOLONG
        umask(previousMask)
        if bound != 0 || listen(socket, Self.backlog) != 0 {
            let error = bound != 0 ? bound : errno
            close(socket)
            throw SocketPath.Problem(description: "cannot listen on \(path): \(String(cString: strerror(error)))")
        }
        return socket
    }

    /// Takes each accepted connection on the loop: reads who is at the other end, admits it
    /// under the connection limits (or not: then it is told so and closed), and serves it.
    private struct Acceptor: @unchecked Sendable {
        let server: TokenSocketServer
        let loop: SocketLoop

        func accept(_ socket: Int32) {
            let configuration = server.configuration
            let logger = server.logger
            let status = server.status
            let peer = PeerCredentialsReader.read(socket: socket)
            let limit = configuration.maxConnections
            let perUIDLimit = configuration.maxConnectionsPerUID
            let admission = status.server.admit(limit: limit, uid: peer?.uid, perUIDLimit: perUIDLimit)
            switch admission {
            case .admitted: break
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
            let handler = RequestHandler(
                context: server.connectionContext,
                logger: logger,
                admission: admission,
                peer: peer,
                requestTimeout: configuration.requestTimeout,
                stallTimeout: configuration.stallTimeout
            )
            let loop = self.loop
            let server = self.server
            let connection = SocketConnection(socket: socket, loop: loop, handler: handler) {
                if admission == .admitted { status.server.release(uid: peer?.uid) }
                server.giveMemoryBack(on: loop)
            }
            connection.open()
        }
    }

    /// Connections closed since the allocator was last asked to give freed memory back.
    private let closedSinceTrim = Mutex(0)

    /// Every 256 closed connections, asks the allocator (a second later, on the loop) to return
    /// the memory they freed to the system: glibc keeps freed memory in its arenas otherwise, so
    /// a burst of connections that hit their bounds would leave the agent that much larger for
    /// good.
    private func giveMemoryBack(on loop: SocketLoop) {
        let due = closedSinceTrim.withLock { closed -> Bool in
            closed += 1
            guard closed >= 256 else { return false }
            closed = 0
            return true
        }
        if due { _ = loop.schedule(in: .seconds(1)) { _ = fsm_return_free_memory() } }
    }

    /// Asks every connection to finish the replies it owes and close, waits for them up to the
    /// drain time-out, then closes those left.
    private func drainConnections(_ loop: SocketLoop) async {
        await onLoop(loop) { for connection in loop.openConnections { connection.quiesce() } }
        let deadline = ContinuousClock.now + .nanoseconds(configuration.drainTimeout.nanoseconds)
        while ContinuousClock.now < deadline {
            if await onLoop(loop, { loop.connectionCount }) == 0 { return }
            try? await Task.sleep(for: .milliseconds(10))
        }
        await onLoop(loop) { for connection in loop.openConnections { connection.close() } }
    }

    /// Runs `body` on the loop and returns what it returns.
    private func onLoop<T: Sendable>(_ loop: SocketLoop, _ body: @escaping () -> T) async -> T {
        let body = UnsafeTransfer(body)
        return await withCheckedContinuation { continuation in
            loop.execute { continuation.resume(returning: body.value()) }
        }
    }
}
