import NIOCore
import TokenAgent

/// A timer a transport started for its request handler.
protocol TransportTimer {
    /// Stops the timer, if it has not fired.
    func cancel()
}

/// What a ``RequestHandler`` needs of the connection it serves: the agent's socket loop serves
/// its connections with ``SocketConnection``, the one transport (the tests drive the handler
/// through it too, on socket pairs). Every call is made on the connection's own thread, and
/// every body passed in runs there.
protocol ConnectionTransport: AnyObject {
    /// Whether the output not yet taken by the socket is under its high-water mark.
    var isWritable: Bool { get }
    /// Writes `bytes` after everything written before: now, or as the socket takes them. The
    /// bytes are borrowed for the call: what the socket does not take at once is copied. It
    /// calls nothing of the handler's before it returns (what it has to tell, it tells in a
    /// later turn), so the handler may lend its own output.
    func write(_ bytes: UnsafeRawBufferPointer)
    /// Lets reading go on after the handler held it.
    func read()
    /// Closes the connection.
    func close()
    /// Shuts the connection's sending side and reads on; closes it at once if that fails.
    func closeOutput()
    /// Runs `body` once everything written so far has gone to the socket (or the connection
    /// failed).
    func whenWritten(_ body: @escaping () -> Void)
    /// Runs `body` after `delay`, unless cancelled.
    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> any TransportTimer
    /// Runs `wait` as a task, then `body` with its outcome on the connection's thread. The task
    /// is returned, to be cancelled when nobody waits for its outcome any more.
    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        to body: @escaping (TokenEngine.Outcome) -> Void
    ) -> Task<Void, Never>
    /// The connection's socket descriptor, for `sendmsg` with a descriptor attached; `nil` when
    /// it has none (closed, or not a socket of its own).
    var socketDescriptor: Int32? { get }
    /// Runs `body` once the socket can take more output than it could (or the connection
    /// closed): for a send the socket refused for want of room.
    func whenSocketWritable(_ body: @escaping () -> Void)
    /// Runs `body` in a later turn, once the loop has served what else is ready: for a
    /// connection that used up its turn with work left.
    func continueLater(_ body: @escaping () -> Void)
}
