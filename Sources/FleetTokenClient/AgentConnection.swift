import Dispatch
import Synchronization
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The connection could not be made.
struct ConnectionLost: Error, CustomStringConvertible {
    var description: String
}

/// One persistent, pipelined connection to the agent.
///
/// Requests are written in the order they are queued and replies are matched to them in order.
/// A caller queues its request bytes and its continuation under the connection's lock (which the
/// memo never takes) and one writer at a time sends everything queued, so the requests of a burst
/// of concurrent callers leave in one `send` (see ``enqueue(_:timeout:_:)``). The connection's
/// reader thread blocks in `read`, parses every whole reply of a read in one pass and resumes the
/// callers outside the lock. One timer expires the calls that waited too long with no reply
/// arriving (a call behind others waits its turn while their replies come). No thread waits per
/// request.
///
/// The descriptor is closed when the connection is released, never while a writer may still use
/// it; closing the connection shuts the socket down, which ends the reader thread.
final class AgentConnection: Sendable {
    struct State {
        /// Request bytes not yet handed to `send`.
        var outbound: [UInt8] = []
        /// An empty buffer with capacity, swapped in for `outbound` when a writer takes it.
        var spare: [UInt8] = []
        /// Whether a writer is at work (a caller, a scheduled write, or the wait for room when the
        /// socket was full).
        var writing = false
        /// Whether a write of what is queued is scheduled.
        var writeScheduled = false
        var pending = PendingReplies()
        /// Requests queued whose bytes no writer has taken yet.
        var unsent = 0
        /// The deadline the time-out timer is set for, if it is set.
        var timerDeadline: UInt64?
        /// When the last reply came while others were still owed one, in `DispatchTime` uptime
        /// nanoseconds: the calls queued behind it wait from then (``PendingReply/deadline(lastReply:)``).
        var lastReplyAt: UInt64 = 0
        var retired = false
        var closed = false
    }

    let socket: SocketHandle
    var fd: Int32 { socket.fd }
    /// Runs the time-out timer and the wait for room in a full socket.
    let queue: DispatchQueue
    let timer: TimeoutTimer
    let state = Mutex(State())
    private let open = Atomic(true)

    /// Whether the connection can still take requests.
    var isOpen: Bool { open.load(ordering: .relaxed) }

    /// Connects to the agent's socket at `path` (a blocking `connect`: call it under no lock) and
    /// starts the connection's reader thread.
    init(path: String) throws(ConnectionLost) {
        let fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else {
            // The path is not repeated here: the error that reaches the caller names the socket.
            throw ConnectionLost(description: "connect: \(String(cString: strerror(-fd)))")
        }
        #if canImport(Darwin)
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
        self.socket = SocketHandle(fd: fd)
        self.queue = DispatchQueue(label: "fleet-token-client.connection")
        self.timer = TimeoutTimer(DispatchSource.makeTimerSource(queue: queue))
        timer.source.setEventHandler { [weak self] in self?.timerFired() }
        timer.source.resume()
        // The thread holds the connection only while it handles a read, so a connection nobody
        // else holds is released (and its socket shut down, which ends the thread).
        let socket = self.socket
        let connection = WeakConnection(self)
        DetachedThread.start { Self.readReplies(socket, for: connection) }
    }

    deinit {
        // Nobody waits on a connection nobody holds, and no writer can be using the descriptor.
        fail("connection released")
        socket.release()
    }

    /// Sends `request` and waits for its reply, while the connection brings a reply at least
    /// every `timeout` seconds: timed out once `timeout` passes with no reply since the request
    /// was queued or since the last reply came (``PendingReply/deadline(lastReply:)``).
    nonisolated(nonsending) func exchange(_ request: WireRequest, timeout: Double) async -> ExchangeOutcome {
        // At most ten years: a deadline must stay a number of nanoseconds.
        let nanoseconds = UInt64(min(max(0, timeout), 315_360_000) * 1e9)
        return await withUnsafeContinuation { continuation in
            enqueue(request, timeout: nanoseconds, continuation)
        }
    }

    /// Takes no new requests (``isOpen`` turns false) but lets those sent finish; closes once
    /// none is owed a reply. Used after a time-out, so later calls do not queue behind a reply
    /// that is late: requests queued but not yet written are handed back (``ExchangeOutcome/notSent``)
    /// to be sent on a new connection.
    func retire() {
        open.store(false, ordering: .relaxed)
        let (unsent, idle) = state.withLock { state -> ([ReplyWaiter], Bool) in
            state.retired = true
            var unsent: [ReplyWaiter] = []
            // With a writer at work, the queued bytes may hold the rest of a request it began.
            if !state.writing, state.unsent > 0 {
                unsent = state.pending.removeLast(state.unsent)
                state.unsent = 0
                state.outbound.removeAll(keepingCapacity: true)
            }
            return (unsent, state.pending.isEmpty)
        }
        for continuation in unsent { continuation.resume(returning: .notSent) }
        if idle { fail("connection retired") }
    }

    /// Closes the connection; waiting callers get ``ExchangeOutcome/lost(_:)``.
    func shutdown() {
        fail("connection closed by the client")
    }

    /// Closes the connection (shuts the socket down) and hands `reason` to every caller still
    /// waiting: as ``ExchangeOutcome/invalidReply(_:)`` when the peer broke the protocol, else as
    /// ``ExchangeOutcome/lost(_:)``.
    func fail(_ reason: String, brokeProtocol: Bool = false) {
        open.store(false, ordering: .relaxed)
        let waiting = state.withLock { state -> [ReplyWaiter]? in
            guard !state.closed else { return nil }
            state.closed = true
            state.outbound = []
            return state.pending.removeAll()
        }
        guard let waiting else { return }
        shutdownSocket(fd)
        timer.source.cancel()
        for continuation in waiting {
            continuation.resume(returning: brokeProtocol ? .invalidReply(reason) : .lost(reason))
        }
    }

    // MARK: Time-outs

    /// Sets the timer for `deadline` unless it is set for an earlier one. Called under the lock.
    func armTimer(_ state: inout State, for deadline: UInt64) {
        if let armed = state.timerDeadline, armed <= deadline { return }
        state.timerDeadline = deadline
        timer.source.schedule(deadline: DispatchTime(uptimeNanoseconds: deadline), leeway: .milliseconds(2))
    }

    private func timerFired() {
        let now = DispatchTime.now().uptimeNanoseconds
        let expired = state.withLock { state -> [ReplyWaiter] in
            state.timerDeadline = nil
            let (expired, next) = state.pending.expire(at: now, lastReply: state.lastReplyAt)
            if let next { armTimer(&state, for: next) }
            return expired
        }
        for continuation in expired { continuation.resume(returning: .timedOut) }
    }

    /// The connection's time-out timer: a dispatch source, which is thread-safe.
    struct TimeoutTimer: @unchecked Sendable {
        let source: any DispatchSourceTimer
        init(_ source: any DispatchSourceTimer) { self.source = source }
    }
}

/// Shuts both directions of the socket down: the peer sees the end of the stream, a blocked
/// `read` returns. The descriptor stays open (and its number taken) until it is closed.
private func shutdownSocket(_ fd: Int32) {
    #if canImport(Glibc)
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    #else
        _ = Darwin.shutdown(fd, SHUT_RDWR)
    #endif
}

/// The connection's socket descriptor, held by the connection and its reader thread: closed when
/// both let go, so no thread ever uses a descriptor number that was closed (and maybe reused).
final class SocketHandle: Sendable {
    let fd: Int32
    private let holders = Atomic(2)

    init(fd: Int32) { self.fd = fd }

    /// Lets go of the descriptor; the last holder closes it.
    func release() {
        if holders.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { close(fd) }
    }
}

/// A connection, not kept alive by whoever holds this.
struct WeakConnection: Sendable {
    weak var connection: AgentConnection?

    init(_ connection: AgentConnection) { self.connection = connection }
}
