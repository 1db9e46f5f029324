import CSharedMemory
import NIOCore
import TokenAgent
import TokenSegment
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// What one connection asked for and was sent of the shared-memory segments, and its limits.
struct DescriptorLedger {
    /// The most descriptors a connection is sent in a minute.
    static let maxPerMinute = 32
    /// The most descriptors queued, not yet sent, on a connection.
    static let maxQueued = 8
    /// The most TOUCH lines a connection has counted in a second; more are answered and ignored.
    static let maxTouchesPerSecond = 20
    /// How long a descriptor may wait for room in a full socket before the connection is closed.
    static let sendTimeout = TimeAmount.seconds(10)

    /// (kind, generation) pairs sent: each at most once per connection.
    var sent: Set<String> = []
    /// Offers queued and not yet sent.
    var queued = 0
    /// A descriptor is being sent: later replies wait.
    var sending = false
    /// The start of the current minute's count, and the count.
    var minuteStart = NIODeadline.uptimeNanoseconds(0)
    var inMinute = 0
    /// The start of the current second's TOUCH count, and the count.
    var touchSecondStart = NIODeadline.uptimeNanoseconds(0)
    var touchesInSecond = 0
}

extension RequestHandler {
    /// The reply owed to `SHM <kind> [<layout> ...]`: the kind's segment offered, or why not. The
    /// reply names the layout the agent writes whatever layouts the request names: a reader that
    /// cannot read it refuses it and uses the socket.
    func shmReply(kind: String) -> PendingReply {
        let engine = context.engine
        guard engine.kinds.contains(kind) else {
            return .reply(.error(EngineFailure.unknownKind(kind, configured: engine.kinds).wireError), verb: .shm)
        }
        guard let segments = context.segments else {
            return .reply(.error(WireError(.unavailable, "shared memory is off")), verb: .shm)
        }
        let now = NIODeadline.now()
        if now - descriptors.minuteStart >= .minutes(1) {
            descriptors.minuteStart = now
            descriptors.inMinute = 0
        }
        guard descriptors.inMinute < DescriptorLedger.maxPerMinute, descriptors.queued < DescriptorLedger.maxQueued
        else {
            return .reply(.error(WireError(.busy, "too many segment requests on this connection")), verb: .shm)
        }
        let sent = descriptors.sent
        let offer: SharedSegments.Offer
        switch segments.offer(kind: kind, unlessAlreadySent: { sent.contains("\(kind)/\($0)") }) {
        case .offered(let offered): offer = offered
        case .none: return .reply(.error(WireError(.busy, "no segment for kind \(kind) now")), verb: .shm)
        case .alreadySent(let generation):
            return .reply(.error(WireError(.busy, "segment \(generation) of kind \(kind) already sent")), verb: .shm)
        }
        descriptors.sent.insert("\(kind)/\(offer.generation)")
        descriptors.inMinute += 1
        descriptors.queued += 1
        return .offer(offer)
    }

    /// `TOUCH`: marks the cached keys read, if the peer may read the kind and the connection is
    /// within its rate; never fetches.
    func touch(kind: String, ids: [String]) {
        let now = NIODeadline.now()
        if now - descriptors.touchSecondStart >= .seconds(1) {
            descriptors.touchSecondStart = now
            descriptors.touchesInSecond = 0
        }
        descriptors.touchesInSecond += 1
        guard descriptors.touchesInSecond <= DescriptorLedger.maxTouchesPerSecond,
            context.access.check(peer, kind: kind) == nil,
            context.engine.touch(kind: kind, ids: ids) != nil  // nil: the kind is not configured
        else { return }
        context.server.countTouch()
    }

    /// Sends the head reply's descriptor with its reply line once every earlier reply is written,
    /// then goes on with the replies after it.
    func sendDescriptor(_ offer: SharedSegments.Offer) {
        descriptors.sending = true
        flushOutput()
        let line = Array("OK size=\(offer.size) layout=\(SegmentLayout.version) generation=\(offer.generation)\n".utf8)
        let transport = self.transport!
        transport.whenWritten { [self] in
            guard !machine.isClosed else {
                descriptorFailed(offer, reason: "connection closed")
                return
            }
            guard let socket = transport.socketDescriptor else {
                descriptorFailed(offer, reason: "the connection's socket could not be found")
                return
            }
            attemptSend(line[...], offer: offer, socket: socket, until: .now() + descriptorSendTimeout)
        }
    }

    private func attemptSend(
        _ line: ArraySlice<UInt8>,
        offer: SharedSegments.Offer,
        socket: Int32,
        until deadline: NIODeadline
    ) {
        guard !machine.isClosed else {
            descriptorFailed(offer, reason: "connection closed")
            return
        }
        let sent = line.withUnsafeBytes { fsm_send_with_descriptor(socket, $0.baseAddress, $0.count, offer.descriptor) }
        if sent < 0 {
            let now = NIODeadline.now()
            guard errno == EAGAIN || errno == EWOULDBLOCK, now < deadline else {
                descriptorFailed(offer, reason: "sendmsg: \(String(cString: strerror(errno)))")
                return
            }
            // The client is not reading: try again once its socket can take more (epoll says
            // so), later replies still waiting; give up at the deadline. Whichever comes first
            // goes on; the other finds it gone.
            logger.debug(
                "a segment descriptor waits for the client's socket to take more",
                metadata: ["kind": "\(offer.kind)"]
            )
            let pending = PendingSend()
            let timer = transport.schedule(in: deadline - now) { [self] in
                guard pending.take() else { return }
                descriptorFailed(
                    offer,
                    reason: "the client read nothing for \(descriptorSendTimeout.nanoseconds / 1_000_000_000) s"
                )
            }
            transport.whenSocketWritable { [self] in
                guard pending.take() else { return }
                timer.cancel()
                attemptSend(line, offer: offer, socket: socket, until: deadline)
            }
            return
        }
        Glibc.close(offer.descriptor)
        if sent < line.count {
            // The descriptor went with the first byte; the rest of the line follows in order.
            line.withUnsafeBytes { transport.write(UnsafeRawBufferPointer(rebasing: $0[sent...])) }
        }
        context.requests.count(.shm, .ok)
        finishDescriptor()
    }

    private func descriptorFailed(_ offer: SharedSegments.Offer, reason: String) {
        // The head reply owns the descriptor until it is sent: a connection that closed first
        // closed it already (``closeUnsentDescriptors()``), and its number may be another's now.
        if case .offer(let held) = pendingReplies.first, held.descriptor == offer.descriptor {
            Glibc.close(offer.descriptor)
        }
        logger.debug("segment descriptor not sent", metadata: ["reason": "\(reason)"])
        let wasClosed = machine.isClosed
        finishDescriptor()
        if !wasClosed { close() }
    }

    private func finishDescriptor() {
        descriptors.sending = false
        descriptors.queued -= 1
        if case .offer = pendingReplies.first { removeHead() }
        writeReadyReplies()
    }

    /// One wait of a descriptor send, ended once: by the socket turning writable or by the deadline.
    private final class PendingSend {
        private var waiting = true
        /// Whether this caller ends the wait (the first to ask).
        func take() -> Bool {
            defer { waiting = false }
            return waiting
        }
    }

    /// Closes the descriptors of offers never sent (the connection ended first), and forgets
    /// the replies owed: nobody will read them.
    func closeUnsentDescriptors() {
        for case .offer(let offer) in pendingReplies { Glibc.close(offer.descriptor) }
        pendingReplies.removeAll()
    }
}
