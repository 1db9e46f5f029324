import Dispatch
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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
