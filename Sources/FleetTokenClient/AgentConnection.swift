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

extension AgentConnection {
    /// The reader thread: blocks in `read`, writes the requests queued meanwhile, parses every
    /// whole reply of the read and resumes their callers, oldest first, until the connection ends
    /// or is released. It holds the connection only while it handles what it read.
    static func readReplies(_ socket: SocketHandle, for weakConnection: WeakConnection) {
        var reader = ReplyReader()
        var replies: [ReceivedReply] = []
        while true {
            let problem = reader.readReplies(from: socket.fd, into: &replies)
            guard let connection = weakConnection.connection else {
                for received in replies { if let descriptor = received.descriptor { close(descriptor) } }
                break
            }
            if !replies.isEmpty {
                // Replies came, so the agent is being answered: send what waited for them first.
                connection.writeQueued(scheduled: false)
                connection.deliver(replies)
                replies.removeAll(keepingCapacity: true)
            }
            if let problem {
                connection.fail(problem.reason, brokeProtocol: problem.brokeProtocol)
                break
            }
        }
        reader.closeDescriptors()
        socket.release()
    }

    /// Hands `replies` to the oldest callers owed one. Writes what is queued when no request is
    /// left on the wire (no later read would), and closes a retired connection once nothing is
    /// owed.
    func deliver(_ replies: [ReceivedReply]) {
        let (waiting, unasked, retiredAndIdle, batch) = state.withLock { state in
            var waiting: [ReplyWaiter?] = []
            waiting.reserveCapacity(replies.count)
            for _ in replies {
                guard let entry = state.pending.popFirst() else { break }
                waiting.append(entry.continuation)
            }
            // Progress: the calls still owed a reply wait from now (a lone call's reply, the
            // usual case, reads no clock).
            if !state.pending.isEmpty { state.lastReplyAt = DispatchTime.now().uptimeNanoseconds }
            let batch = state.pending.count == state.unsent ? Self.takeWriterRole(&state) : nil
            return (waiting, waiting.count < replies.count, state.retired && state.pending.isEmpty, batch)
        }
        if let batch { write(batch) }
        for (continuation, received) in zip(waiting, replies) {
            guard let continuation else {
                // The caller timed out: nobody takes the descriptor.
                if let descriptor = received.descriptor { close(descriptor) }
                continue
            }
            if let descriptor = received.descriptor {
                continuation.resume(returning: .replyWithDescriptor(received.reply, descriptor))
            } else {
                continuation.resume(returning: .reply(received.reply))
            }
        }
        for received in replies.dropFirst(waiting.count) {
            if let descriptor = received.descriptor { close(descriptor) }
        }
        if unasked {
            fail("a reply came with no request waiting", brokeProtocol: true)
        } else if retiredAndIdle {
            fail("connection retired")
        }
    }
}

extension AgentConnection {
    /// At least this many requests on the wire, and a new one waits for the reader thread, which
    /// writes what is queued each time replies arrive. Fewer, and it is written at once (none)
    /// or by a write scheduled behind the callers being resumed (some).
    static let requestsOnTheWireForReaderWrites = 4

    private enum NextWrite {
        /// The connection takes no requests.
        case refused
        /// A writer at work, a scheduled write or the reader thread sends the request.
        case queued
        /// The caller writes these bytes, everything queued.
        case write([UInt8])
        /// The caller schedules a write.
        case schedule
    }

    /// Queues `request` and its continuation, and sees that everything queued gets written:
    ///
    /// - no request on the wire: the caller writes at once (the latency of a lone call);
    /// - a few: a write is scheduled on the global executor, behind the callers the last read
    ///   resumed, so the requests of those that run meanwhile leave in the same `send`;
    /// - many: replies are on their way, and the reader thread writes everything queued as soon
    ///   as the next ones arrive, the way a pipelining client writes after each read. Large
    ///   batches cost the agent far less than a write per request.
    func enqueue(_ request: WireRequest, timeout: UInt64, _ continuation: ReplyWaiter) {
        let now = DispatchTime.now().uptimeNanoseconds
        let next = state.withLock { state -> NextWrite in
            guard !state.closed, !state.retired else { return .refused }
            let onTheWire = state.pending.count - state.unsent
            request.encode(into: &state.outbound)
            state.pending.append(PendingReply(continuation: continuation, queuedAt: now, timeout: timeout))
            state.unsent += 1
            armTimer(&state, for: now &+ timeout)
            if state.writing || state.writeScheduled || onTheWire >= Self.requestsOnTheWireForReaderWrites {
                return .queued
            }
            if onTheWire == 0 {
                state.writing = true
                return .write(Self.takeOutbound(&state))
            }
            state.writeScheduled = true
            return .schedule
        }
        switch next {
        case .refused: continuation.resume(returning: .notSent)
        case .queued: break
        case .write(let bytes): write(bytes)
        case .schedule: DispatchQueue.global().async { [self] in writeQueued(scheduled: true) }
        }
    }

    /// Writes everything queued unless a writer is at it: the scheduled write, and the reader
    /// thread's after a read.
    func writeQueued(scheduled: Bool) {
        let batch = state.withLock { state -> [UInt8]? in
            if scheduled { state.writeScheduled = false }
            return Self.takeWriterRole(&state)
        }
        if let batch { write(batch) }
    }

    /// Everything queued, with the writer's role, if there is something and nobody holds the role.
    static func takeWriterRole(_ state: inout State) -> [UInt8]? {
        guard !state.closed, !state.writing, !state.outbound.isEmpty else { return nil }
        state.writing = true
        return takeOutbound(&state)
    }

    /// Writes `first`, then whatever callers queued meanwhile, until nothing is queued. When the
    /// socket is full, the rest waits for room on the connection's queue. The caller holds the
    /// writer's role.
    func write(_ first: [UInt8]) {
        var batch = first
        while true {
            var sent = 0
            var socketFull = false
            while sent < batch.count {
                let count = batch.withUnsafeBytes { raw in
                    #if canImport(Glibc)
                        send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
                    #else
                        Darwin.send(fd, raw.baseAddress! + sent, raw.count - sent, MSG_DONTWAIT)
                    #endif
                }
                if count > 0 {
                    sent += count
                } else if count < 0, errno == EINTR {
                    continue
                } else if count < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                    socketFull = true
                    break
                } else {
                    fail("write: \(String(cString: strerror(errno)))")
                    return
                }
            }
            let next = state.withLock { state -> [UInt8]? in
                guard !state.closed else { return nil }
                if socketFull {
                    // Put the rest back in front; the wait for room keeps the writer's role.
                    state.outbound.insert(contentsOf: batch[sent...], at: 0)
                    return nil
                }
                batch.removeAll(keepingCapacity: true)
                if state.spare.capacity < batch.capacity { swap(&state.spare, &batch) }
                guard !state.outbound.isEmpty else {
                    state.writing = false
                    return nil
                }
                return Self.takeOutbound(&state)
            }
            guard let next else {
                if socketFull {
                    let (socket, connection) = (self.socket, WeakConnection(self))
                    queue.async { Self.waitForRoomAndWrite(socket, for: connection) }
                }
                return
            }
            batch = next
        }
    }

    /// Waits (on the connection's queue, never on a caller's thread) until the full socket has
    /// room, then writes what is queued. Holds the writer's role throughout, and the connection
    /// only while it looks at it: a connection released meanwhile shuts its socket down, which
    /// ends the wait.
    private static func waitForRoomAndWrite(_ socket: SocketHandle, for weakConnection: WeakConnection) {
        var poller = pollfd(fd: socket.fd, events: Int16(POLLOUT), revents: 0)
        while true {
            let ready = poll(&poller, 1, 1000)
            guard let connection = weakConnection.connection, !connection.state.withLock({ $0.closed }) else { return }
            if ready > 0 {
                let batch = connection.state.withLock { state -> [UInt8]? in
                    state.closed ? nil : takeOutbound(&state)
                }
                if let batch { connection.write(batch) }
                return
            }
            if ready < 0, errno != EINTR {
                connection.fail("poll: \(String(cString: strerror(errno)))")
                return
            }
        }
    }

    /// Takes the queued bytes, leaving the spare buffer in their place.
    private static func takeOutbound(_ state: inout State) -> [UInt8] {
        state.unsent = 0
        let batch = state.outbound
        state.outbound = state.spare
        state.spare = []
        return batch
    }
}

extension WireRequest {
    /// Appends the request line and its LF to `bytes`: a GET of a kind the wire names as it is
    /// straight from its fields, any other (an access token's, `GET access <name>`) as its ``line``.
    func encode(into bytes: inout [UInt8]) {
        if case .get(let kind, let id, let minValidity) = self, !AccessTokenKind.isAccessKind(kind) {
            bytes.append(contentsOf: "GET ".utf8)
            bytes.append(contentsOf: kind.utf8)
            bytes.append(0x20)
            bytes.append(contentsOf: id.utf8)
            if let minValidity {
                bytes.append(0x20)
                bytes.append(contentsOf: String(minValidity).utf8)
            }
        } else {
            bytes.append(contentsOf: line.utf8)
        }
        bytes.append(0x0A)
    }
}
