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
/// This file holds the connection itself: its state, framing and back-pressure on reading. The
/// rest is split by concern into extensions: the ordered writing of replies and closing
/// (`+Output`), the replies owed (`+PendingReplies`), the verbs (`+Verbs`), the GET fast path (`+SimpleGet`), reply
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

    /// What the connection works with: the engine, the access rules, the counters it feeds.
    let context: ConnectionContext
    /// The connection served. Set by the transport once, before any other call.
    var transport: (any ConnectionTransport)!
    let clock: any AgentClock = SystemAgentClock()
    let logger: Logger
    /// Where the connection is in its life: taking requests, finishing, closed.
    var state = ConnectionState.open
    /// The replies owed, in request order; the first is request `firstSequence`'s.
    var pendingReplies = CircularBuffer<PendingReply>(initialCapacity: 8)
    var firstSequence = 0
    /// The client's end of input came. Independent of ``state``: a half-closed client is still
    /// answered (its lines kept in `deferred` are still taken), and it decides whether closing
    /// lingers.
    var inputClosed = false
    /// Reading is held for back-pressure (``wantsToRead()``) until
    /// ``resumeReadingIfPossible()``. Independent of ``state``: it is the read side's own.
    var readHeld = false
    /// Splits what the connection reads into request lines.
    var framer = RequestFramer()
    /// The shared-memory descriptors this connection was sent and asked for (SHM).
    var descriptors = DescriptorLedger()
    /// The `WARM` fetches this connection may still have outstanding.
    let warmAllowance = WarmAllowance()

    /// Whether the connection was admitted under the connection limits.
    let admission: ServerStatistics.Admission
    /// Who is at the other end; `nil` when the kernel could not tell.
    let peer: PeerCredentials?
    /// How long a partial line may wait for its end while reading.
    let requestTimeout: TimeAmount
    /// A partial line waits for its end (the framer's, independent of ``state``): its clock
    /// runs while reading is not held.
    var partialPending = false
    var partialTimer: (any TransportTimer)?
    /// Replies encoded since the last write; written once per read burst (or at once for replies
    /// that complete outside one). Reused: once the transport has written it, clearing it makes no copy.
    var output = ByteBufferAllocator().buffer(capacity: 4096)
    /// `output` was handed to the transport; clear it before encoding more. (Whose the buffer
    /// is, whatever the connection's state.)
    var outputHandedOver = false
    /// Inside a burst of reads: replies wait for `readComplete()` to be written together. (The
    /// transport's delivery, independent of ``state``.)
    var reading = false
    /// The tasks waiting for fetches on this connection's behalf, by request sequence: cancelled
    /// when the connection closes, so a fetch nobody waits for any more can be dropped.
    var waiting: [Int: Task<Void, Never>] = [:]
    /// Lines read while no more requests could be taken, in order.
    var deferred = DeferredInput()
    /// Re-entrancy guard: inside ``writeReadyReplies()``, a nested call (a reply or a close
    /// made while writing) only asks for another round, `pumpAgain`.
    var pumping = false
    var pumpAgain = false
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
    var workDone = 0
    /// The costly reply at the head was counted against the uid's budget (``CostlyReplyPacer``).
    var costlyHeadPaid = false
    /// Brings the connection back when the costly reply at its head may be written.
    var paceTimer: (any TransportTimer)?
    /// A continuation is asked for (``continueLater(_:)``) and has not run yet: at most one is.
    /// Independent of ``state``: a continuation finds a closed connection and does nothing.
    var continuationPending = false

    init(
        context: ConnectionContext,
        logger: Logger,
        admission: ServerStatistics.Admission = .admitted,
        peer: PeerCredentials? = nil,
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(30),
        descriptorSendTimeout: TimeAmount = DescriptorLedger.sendTimeout
    ) {
        self.context = context
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
        stopTakingRequests()
        pendingReplies.append(.closingError(WireError(.busy, refusal)))
        writeReadyReplies()
    }

    // MARK: Inbound

    /// The bytes of one read.
    func received(_ bytes: ByteBuffer) {
        guard state.takesRequests else { return }
        framer.append(bytes)
        takeFrames()
    }

    /// Takes every frame the bytes read so far hold, in order, while the connection takes
    /// requests; those it cannot take yet wait in `deferred`.
    func takeFrames() {
        while state.takesRequests, let frame = framer.next() {
            take(frame)
        }
        writeReadyReplies()
    }

    func take(_ frame: RequestFrame) {
        // Inside a read burst: replies wait for `channelReadComplete` to be written together.
        // (Lines taken later, from `deferred`, come outside one and are written at once.)
        if case .line = frame { reading = true }
        if deferred.isEmpty, canTakeRequest() {
            process(frame)
        } else {
            deferred.append(frame)
        }
        // A reply that could not be encoded at once (one owed) goes out as soon as it is ready.
        if !pendingReplies.isEmpty { writeReadyReplies() }
    }

    /// Takes the lines kept while no more requests could be, as far as the connection now can.
    /// Whether it took any.
    func processDeferred() -> Bool {
        guard state.takesRequests else {
            deferred.removeAll()
            return false
        }
        var took = false
        while state.takesRequests, canTakeRequest(), let frame = deferred.next() {
            process(frame)
            took = true
        }
        return took
    }

    /// Whether another request may be taken now: fewer than ``maxPending`` replies owed, and the
    /// output under the channel's high-water mark (a cached GET's reply is encoded at once).
    func canTakeRequest() -> Bool {
        if output.readableBytes >= Self.outputFlushBytes { flushOutput() }
        return pendingReplies.count < Self.maxPending && transport.isWritable && !turnSpent
    }

    /// A new turn of the connection's loop begins: the transport calls it as it delivers the
    /// connection's events (a continuation is a turn of its own too). Work in the loop's other
    /// callbacks (a fetch that ended, a timer) counts against the turn the connection last had,
    /// and past it waits for a continuation.
    func startTurn() { workDone = 0 }

    /// Counts `units` of work in the current turn.
    func spend(_ units: Int) { workDone &+= units }

    /// Whether this turn's work is done: what is left waits for a later turn.
    var turnSpent: Bool { workDone >= Self.workPerTurn }

    /// Asks for a later turn when this one is spent and lines, or ready replies, wait.
    @inline(__always)
    func continueIfSpent() {
        // The turn first: the one check a connection within its share pays.
        guard turnSpent, !continuationPending, !state.isClosed,
            !deferred.isEmpty || pendingReplies.first?.isReady == true
        else {
            return
        }
        continuationPending = true
        transport.continueLater { [self] in
            continuationPending = false
            guard !state.isClosed else { return }
            startTurn()
            writeReadyReplies()
        }
    }

    func process(_ frame: RequestFrame) {
        switch frame {
        case .partialLine:
            partialPending = true
            startPartialTimer()
            return
        case .tooLong:
            stopPartialTimer()
            stopTakingRequests()
            append(.closingError(WireError(.badRequest, "line too long")))
        // Counted under `other`, like a line that timed out.
        case .line(let line):
            stopPartialTimer()
            spend(1)
            if !handleSimpleGet(line) {
                switch RequestParser.parse(line.readableBytesView) {
                case .failure(let error):
                    append(.reply(.error(error), verb: RequestVerb(failedLine: line.readableBytesView)))
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
        while state.takesRequests, let frame = framer.next() { take(frame) }
        if state.takesRequests, let last = framer.finish() { take(last) }
        reading = false
        inputClosed = true
        switch state {
        case .open, .finishing: break
        case .lingering:
            // Lingering after our last reply: the client has read it and closed its side.
            transport.close()
            return
        case .closing, .closed:
            // (Before the lingering starts, the replies still being written go first: the close
            // follows them.)
            return
        }
        // No read follows the end of input; the lines read before it are still answered.
        writeReadyReplies()
    }

    /// Graceful shutdown: finish the replies owed, then close.
    func quiesce() {
        reading = false
        stopTakingRequests()
        writeReadyReplies()
    }

    /// The connection is closed.
    func inactive() {
        state = .closed
        // Nobody will read these answers: the fetches they wait for may be dropped.
        for task in waiting.values { task.cancel() }
        waiting = [:]
        pausePartialTimer()
        stallTimer?.cancel()
        stallTimer = nil
        paceTimer?.cancel()
        paceTimer = nil
        deferred.removeAll()
        closeUnsentDescriptors()
    }

    /// Takes no more requests: the connection closes once every reply owed is written.
    func stopTakingRequests() {
        if state == .open { state = .finishing }
    }

    /// The connection failed: close it.
    func failed(_ error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        close()
    }
}
