import Logging
import NIOCore
import TokenAgent
import TokenSegment
import TokenWire

/// Serves one connection: parses each line, asks the engine, and writes exactly one reply per
/// request in request order, however the answers arrive. Every buffer is bounded in bytes,
/// whatever the peer does: past ``maxPending`` owed replies the lines already read wait as bytes
/// (at most the reads made before reading paused) and reading stops; replies are encoded only
/// while the channel is writable (under its high-water mark), so a peer that does not read its
/// replies stops the connection instead of growing it, and is closed once it has stalled for the
/// stall time-out.
///
/// This file holds the connection itself: its state, framing, back-pressure and the ordered
/// writing of replies. The rest is split by concern into extensions: the reply slots
/// (`RequestHandler+Slots.swift`), the verbs (`+Verbs`), the GET fast path (`+SimpleGet`), reply
/// encoding (`+Encoding`), the slow-client clocks (`+SlowClients`) and the shared-memory verbs
/// (`SharedMemory/RequestHandler+SharedMemory.swift`).
///
/// It knows its connection only as a ``ConnectionTransport``: the socket loop's own
/// (``SocketConnection``). The transport calls in with what happens on the connection:
/// ``activate()``, ``received(_:)``, ``readComplete()``, ``inputEnded()``, ``quiesce()``,
/// ``wantsToRead()``, ``writabilityChanged()`` and ``inactive()``.
final class RequestHandler {
    /// The most requests answered-or-pending per connection before reading pauses.
    static let maxPending = 128
    /// The most work the connection does in one turn of its loop, in request lines taken (a
    /// costly reply counts more: ``WorkCost``). Past it the lines read wait, as bytes, for a later
    /// turn (``ConnectionTransport/continueLater(_:)``), so every other connection ready is served
    /// in between: a peer that pipelines thousands of requests delays the others by one turn of
    /// its, not by everything it sent. Above the deepest pipeline the benchmarks use (32), so a
    /// pipelining client loses no throughput to it.
    static let workPerTurn = 64

    let engine: TokenEngine
    /// The connection served. Set by the transport once, before any other call.
    var transport: (any ConnectionTransport)!
    private let clock: any AgentClock = SystemAgentClock()
    let status: AgentStatus
    let logger: Logger
    var slots = CircularBuffer<Slot>(initialCapacity: 8)
    var firstSequence = 0
    var acceptingRequests = true
    private var inputClosed = false
    /// After the last reply: our side is shut and the client's input is drained until it ends.
    private var lingering = false
    /// Graceful shutdown: close once every owed reply is written.
    private var finishing = false
    var readHeld = false
    var closed = false
    /// Splits what the connection reads into request lines.
    private var framer = RequestFramer()
    /// The shared-memory descriptors this connection was sent and asked for (SHM).
    var descriptors = DescriptorLedger()
    /// The `WARM` fetches this connection may still have outstanding.
    let warmAllowance = WarmAllowance()

    /// Whether the connection was admitted under the connection limits.
    private let admission: ServerStatistics.Admission
    /// Who is at the other end; `nil` when the kernel could not tell.
    let peer: PeerCredentials?
    /// How long a partial line may wait for its end while reading.
    let requestTimeout: TimeAmount
    /// A partial line waits for its end.
    var partialPending = false
    var partialTimer: (any TransportTimer)?
    /// Replies encoded since the last write; written once per read burst (or at once for replies
    /// that complete outside one). Reused: once the transport has written it, clearing it makes no copy.
    var output = ByteBufferAllocator().buffer(capacity: 4096)
    /// `output` was handed to the channel; clear it before encoding more.
    var outputHandedOver = false
    /// Inside a burst of reads: replies wait for `channelReadComplete` to be written.
    private var reading = false
    /// The tasks waiting for fetches on this connection's behalf, by request sequence: cancelled
    /// when the connection closes, so a fetch nobody waits for any more can be dropped.
    var waiting: [Int: Task<Void, Never>] = [:]
    /// Lines read while no more requests could be taken, in order.
    private var deferred = DeferredInput()
    /// Inside ``writeReadyReplies()``: a nested call only asks for another round.
    private var pumping = false
    private var pumpAgain = false
    /// How long the peer may leave its replies unread (the channel unwritable) before it is closed.
    let stallTimeout: TimeAmount
    /// How long a segment descriptor may wait for the peer's socket to take it.
    let descriptorSendTimeout: TimeAmount
    var stallTimer: (any TransportTimer)?
    /// The configured kind names and the engine's kinds version they were read at.
    var kindNames: [(name: String, bytes: [UInt8])] = []
    var kindNamesVersion = -1
    /// The kinds the peer was allowed under the rules version last seen.
    var allowedKinds = AllowedKinds()
    /// The work done in the current turn (``startTurn()``).
    private var workDone = 0
    /// A continuation is asked for (``continueLater(_:)``) and has not run yet.
    private var continuationPending = false

    init(
        engine: TokenEngine,
        status: AgentStatus,
        logger: Logger,
        admission: ServerStatistics.Admission = .admitted,
        peer: PeerCredentials? = nil,
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(30),
        descriptorSendTimeout: TimeAmount = DescriptorLedger.sendTimeout
    ) {
        self.engine = engine
        self.status = status
        self.logger = logger
        self.admission = admission
        self.peer = peer
        self.requestTimeout = requestTimeout
        self.stallTimeout = stallTimeout
        self.descriptorSendTimeout = descriptorSendTimeout
    }

    /// The connection is open: a connection over the limits is told so and closed.
    func activate() {
        let refusal: String
        switch admission {
        case .admitted: return
        case .tooManyConnections: refusal = "too many connections"
        case .tooManyForUID(let uid): refusal = "too many connections for uid \(uid)"
        }
        acceptingRequests = false
        slots.append(Slot(reply: .error(WireError(.busy, refusal)), closeAfter: true))
        writeReadyReplies()
    }

    // MARK: Inbound

    /// The bytes of one read.
    func received(_ bytes: ByteBuffer) {
        guard acceptingRequests, !closed else { return }
        framer.append(bytes)
        takeFrames()
    }

    /// Takes every frame the bytes read so far hold, in order, while the connection takes
    /// requests; those it cannot take yet wait in `deferred`.
    private func takeFrames() {
        while acceptingRequests, !closed, let frame = framer.next() {
            take(frame)
        }
        writeReadyReplies()
    }

    private func take(_ frame: RequestFrame) {
        // Inside a read burst: replies wait for `channelReadComplete` to be written together.
        // (Lines taken later, from `deferred`, come outside one and are written at once.)
        if case .line = frame { reading = true }
        if deferred.isEmpty, canTakeRequest() {
            process(frame)
        } else {
            deferred.append(frame)
        }
        // A reply that could not be encoded at once (a slot) goes out as soon as it is ready.
        if !slots.isEmpty { writeReadyReplies() }
    }

    /// Takes the lines kept while no more requests could be, as far as the connection now can.
    /// Whether it took any.
    private func processDeferred() -> Bool {
        guard acceptingRequests, !closed else {
            deferred.removeAll()
            return false
        }
        var took = false
        while acceptingRequests, !closed, canTakeRequest(), let frame = deferred.next() {
            process(frame)
            took = true
        }
        return took
    }

    /// Whether another request may be taken now: fewer than ``maxPending`` replies owed, and the
    /// output under the channel's high-water mark (a cached GET's reply is encoded at once).
    private func canTakeRequest() -> Bool {
        if output.readableBytes >= Self.outputFlushBytes { flushOutput() }
        return slots.count < Self.maxPending && transport.isWritable && !turnSpent
    }

    /// A new turn of the connection's loop begins: the transport calls it as it delivers the
    /// connection's events (a continuation is a turn of its own too). Work in the loop's other
    /// callbacks (a fetch that ended, a timer) counts against the turn the connection last had,
    /// and past it waits for a continuation.
    func startTurn() { workDone = 0 }

    /// Counts `units` of work in the current turn.
    func spend(_ units: Int) { workDone &+= units }

    /// Whether this turn's work is done: what is left waits for a later turn.
    private var turnSpent: Bool { workDone >= Self.workPerTurn }

    /// Asks for a later turn when this one is spent and lines, or ready replies, wait.
    @inline(__always)
    private func continueIfSpent() {
        // The turn first: the one check a connection within its share pays.
        guard turnSpent, !continuationPending, !closed, !deferred.isEmpty || slots.first?.isReady == true else {
            return
        }
        continuationPending = true
        transport.continueLater { [self] in
            continuationPending = false
            guard !closed else { return }
            startTurn()
            writeReadyReplies()
        }
    }

    private func process(_ frame: RequestFrame) {
        switch frame {
        case .partialLine:
            partialPending = true
            startPartialTimer()
            return
        case .tooLong:
            stopPartialTimer()
            acceptingRequests = false
            append(Slot(reply: .error(WireError(.badRequest, "line too long")), closeAfter: true))
        // Counted under `other`, like a line that timed out.
        case .line(let line):
            stopPartialTimer()
            spend(1)
            if !handleSimpleGet(line) {
                switch RequestParser.parse(line.readableBytesView) {
                case .failure(let error):
                    append(Slot(reply: .error(error), verb: RequestVerb(failedLine: line.readableBytesView)))
                case .success(let request): handle(request)
                }
            }
        }
    }

    /// A burst of reads ended: the replies it made ready are written together.
    func readComplete() {
        reading = false
        flushOutput()
    }

    /// The peer finished sending. (Events come outside read bursts, so what they make ready is
    /// written at once.)
    func inputEnded() {
        // The lines read before the end of input, and a last one without its LF, are
        // requests too.
        while acceptingRequests, !closed, let frame = framer.next() { take(frame) }
        if acceptingRequests, !closed, let last = framer.finish() { take(last) }
        reading = false
        inputClosed = true
        if closed {
            // Lingering after our last reply: the client has read it and closed its side. (Before
            // the lingering starts, the replies still being written go first: the close follows
            // them.)
            if lingering { transport.close() }
            return
        }
        // No read follows the end of input; the lines read before it are still answered.
        writeReadyReplies()
    }

    /// Graceful shutdown: finish the replies owed, then close.
    func quiesce() {
        reading = false
        acceptingRequests = false
        finishing = true
        writeReadyReplies()
    }

    /// The connection is closed.
    func inactive() {
        closed = true
        // Nobody will read these answers: the fetches they wait for may be dropped.
        for task in waiting.values { task.cancel() }
        waiting = [:]
        pausePartialTimer()
        stallTimer?.cancel()
        stallTimer = nil
        deferred.removeAll()
        closeUnsentDescriptors()
    }

    /// The connection failed: close it.
    func failed(_ error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        close()
    }

    // MARK: Outbound and back-pressure

    /// Whether the transport may read more now. When it may not (too many replies owed, lines
    /// kept for later, or the output over its bound), reading is held until
    /// ``resumeReadingIfPossible()`` lets it go on through ``ConnectionTransport/read()``.
    /// Lingering after the last reply, reading goes on: what the client still sends is dropped.
    func wantsToRead() -> Bool {
        if closed { return true }
        if slots.count >= Self.maxPending || !deferred.isEmpty || !transport.isWritable {
            readHeld = true
            pausePartialTimer()
            return false
        }
        return true
    }

    /// The output crossed its high- or low-water mark.
    func writabilityChanged() {
        if transport.isWritable {
            stallTimer?.cancel()
            stallTimer = nil
            writeReadyReplies()
        } else {
            startStallTimer()
        }
    }

    func append(_ slot: Slot) {
        slots.append(slot)
    }

    /// Writes the replies at the head that are ready, in order, and takes the lines kept for
    /// later as far as it can; closes after QUIT, a too-long line, or end of input once nothing
    /// is owed.
    func writeReadyReplies() {
        guard !pumping else {
            pumpAgain = true
            return
        }
        pumping = true
        defer { pumping = false }
        repeat {
            pumpAgain = false
            writeReadyRepliesOnce()
            if processDeferred() { pumpAgain = true }
        } while pumpAgain && !closed
        guard !closed else { return }
        if inputClosed || finishing, slots.isEmpty, deferred.isEmpty {
            close()
            return
        }
        continueIfSpent()
        resumeReadingIfPossible()
    }

    private func writeReadyRepliesOnce() {
        guard !closed, !descriptors.sending else { return }
        // Replies that render much (a backlog of STATS or METRICS that a slow fetch at the head
        // held) go out a turn's worth at a time too; the rest wait for the connection's next turn.
        while !turnSpent, var head = slots.first, head.isReady {
            // The output is bounded: while the peer leaves what it was sent unread, the rest waits.
            if !transport.isWritable { break }
            if let offer = head.offer {
                // Everything before it is written first; the rest waits for the descriptor.
                sendDescriptor(offer)
                return
            }
            if isStale(head), let key = head.key {
                // Never a token with under 10 s left: ask again now.
                switch engine.lookup(kind: key.kind, id: key.id, minValidity: key.minValidity, requester: peer?.uid) {
                case .ready(let outcome):
                    head.reply = Self.reply(outcome)
                    if isStale(head) { head.reply = .error(WireError(.unavailable, "token expired while queued")) }
                case .pending(let wait):
                    slots[slots.startIndex].reply = nil
                    deliver(wait, sequence: firstSequence)
                }
                if head.reply == nil || slots.first?.reply == nil { break }
            }
            if case .token = head.reply, let kind = head.kind, head.rulesVersion != status.access.version {
                // The rules changed while the reply waited (a fetch, or replies before it): the
                // token goes out only if they still allow this peer the kind.
                head.rulesVersion = status.access.version
                if let denied = status.access.check(peer, kind: kind) { head.reply = .error(denied) }
            }
            slots.removeFirst()
            firstSequence += 1
            if head.infoWhenDue, let key = head.key {
                let reply: Reply
                switch engine.info(kind: key.kind, id: key.id) {
                case .failure(let failure): reply = .error(failure.wireError)
                case .success(let info): reply = .line(.ok(KeyInfoLine.text(info)))
                }
                encode(reply)
                status.metrics.requests.count(head.verb, Self.code(of: reply))
                spend(WorkCost.info)
            } else if head.metricsWhenDue {
                encodeMetrics()
                status.metrics.requests.count(head.verb, .ok)
                spend(WorkCost.metrics)
            } else if let reply = head.statsWhenDue ? .line(.ok(status.statsText())) : head.reply {
                if head.statsWhenDue { spend(WorkCost.stats) }
                encode(reply)
                status.metrics.requests.count(head.verb, Self.code(of: reply))
            } else if head.verb == .quit {
                status.metrics.requests.count(.quit, .ok)
            }
            if head.closeAfter {
                close()
                return
            }
            if output.readableBytes >= Self.outputFlushBytes { flushOutput() }
        }
        if !reading { flushOutput() }
    }

    /// Whether `slot` holds a token that has aged under the serving floor while its reply waited
    /// behind slower replies (replies go out in request order).
    private func isStale(_ slot: Slot) -> Bool {
        guard case .token(let served) = slot.reply, slot.key != nil else { return false }
        return Double(served.expiresAt) - clock.wallSeconds < engine.policy.servingFloor
    }

    /// The result code a reply is counted under.
    private static func code(of reply: Reply) -> ReplyCode {
        if case .line(.error(let error)) = reply { return ReplyCode(error.code) }
        return .ok
    }

    /// Output is written before it grows past this, even inside a read burst.
    static let outputFlushBytes = 32 * 1024

    /// Hands what is encoded to the transport.
    func flushOutput() {
        guard !outputHandedOver, output.readableBytes > 0, !closed else { return }
        transport.write(output)
        outputHandedOver = true
    }

    private func resumeReadingIfPossible() {
        guard readHeld, !closed, slots.count < Self.maxPending, deferred.isEmpty, transport.isWritable else {
            return
        }
        readHeld = false
        startPartialTimer()
        transport.read()
    }

    /// Closes after the last reply is written. Unless the client already finished sending, our
    /// side is shut first and what the client still sends is read and dropped for up to a second:
    /// closing with unread input would reset the connection and could destroy replies the client
    /// has not read yet.
    func close() {
        guard !closed else { return }
        flushOutput()
        closed = true
        acceptingRequests = false
        pausePartialTimer()
        let transport = self.transport!
        transport.whenWritten { [self] in
            // The client finished sending (before the close, or while the last replies were
            // written): nothing to drain.
            guard !inputClosed else {
                transport.close()
                return
            }
            lingering = true
            transport.closeOutput()
            _ = transport.schedule(in: .seconds(1)) { transport.close() }
            transport.read()
        }
    }
}
