import Logging
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// A socket loop of its own serving sockets the caller connected (one end of a socket pair, say)
/// with the agent's real request handler and engine, as ``TokenSocketServer`` serves each
/// connection it accepts (with no peer credentials, so under open access rules): for benchmarks
/// that measure the path that serves, in-process.
public final class SocketServingLoop: Sendable {
    private let loop: SocketLoop
    private let context: ConnectionContext
    private let logger: Logger

    /// Starts a loop's thread serving with `engine` and `status`.
    public init(engine: TokenEngine, status: AgentStatus, logger: Logger) throws {
        loop = try SocketLoop(logger: logger)
        self.context = ConnectionContext(engine: engine, status: status)
        self.logger = logger
        loop.start(name: "serving loop")
    }

    /// Serves the connected stream socket `socket` until either side closes it; the loop owns it
    /// from now on (it is made non-blocking, and closed when the connection ends).
    public func serve(_ socket: Int32) {
        _ = fcntl(socket, F_SETFL, fcntl(socket, F_GETFL) | O_NONBLOCK)
        let handler = RequestHandler(context: context, logger: logger)
        let loop = self.loop
        loop.execute { SocketConnection(socket: socket, loop: loop, handler: handler) {}.open() }
    }

    /// Closes every connection and ends the loop's thread.
    public func stop() async {
        await loop.stop()
    }
}
