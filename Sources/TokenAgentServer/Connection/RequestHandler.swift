import Logging
import NIOCore
import TokenAgent
import TokenSegment
import TokenWire

/// Serves one connection: parses each line, asks the engine, and writes exactly one reply per
/// request in request order, however the answers arrive. Every buffer is bounded in bytes,
/// whatever the peer does: past ``maxPending`` owed replies the lines already read wait as bytes
/// (at most the reads made before reading paused) and reading stops; replies are encoded only
/// while the transport is writable (under its high-water mark), so a peer that does not read its
/// replies stops the connection instead of growing it, and is closed once it has stalled for the
/// stall time-out.
///
/// The connection's life (taking requests, finishing, closing, lingering, closed; reading held;
/// its timers) is a value, ``ConnectionStateMachine``: this file feeds it what happens and performs
/// what it answers. It also holds the replies owed, in order, and writes them. What the requests
/// mean (verbs, access checks, the engine, encoding) lives apart, in `RequestHandler+Requests`,
/// and the shared-memory verbs in `SharedMemory/RequestHandler+SharedMemory`.
///
/// It knows its connection only as a ``ConnectionTransport``: the socket loop's own
/// (``SocketConnection``), or a test's. The transport calls in with what happens on the
/// connection: ``activate()``, ``received(_:)``, ``readComplete()``, ``inputEnded()``,
/// ``quiesce()``, ``wantsToRead()``, ``writabilityChanged()`` and ``inactive()``.
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
    /// Output is handed to the transport before it grows past this, even inside a read burst.
    static let outputFlushBytes = 32 * 1024

    // The fields a cached GET reads come first, together, so that its connection's state takes
    // few cache lines (a class keeps its fields in the order declared): at 64 connections each
    // GET finds its connection's lines pushed out of L1 by the others'.

    /// What the connection works with: the engine, the access rules, the counters it feeds.
    let context: ConnectionContext
    /// The connection served. Set by the transport once, before any other call.
    var transport: (any ConnectionTransport)! {
        didSet {
            transportBox = transport.map(TransportBox.init)
            borrowedTransport = transportBox.map { Unmanaged.passUnretained($0) }
        }
    }
    /// `transport`, boxed so that a flush can borrow it through `Unmanaged` rather than retain
    /// it (an existential cannot be held unretained): `transportBox` holds it as long as
    /// `transport` is set, `borrowedTransport` lends it.
    private var transportBox: TransportBox?
    private var borrowedTransport: Unmanaged<TransportBox>?
    /// Who is at the other end; `nil` when the kernel could not tell.
    let peer: PeerCredentials?
    /// Replies encoded since the last hand-over; lent to the transport once per read burst (or
    /// at once for replies that complete outside one), which copies only what the socket does
    /// not take. Reused: the transport keeps no share of it, so clearing it makes no copy.
    var output = ByteBufferAllocator().buffer(capacity: 4096)
    /// `output` was handed to the transport (written, or copied where it waits); clear it before
    /// encoding more.
    var outputHandedOver = false
    /// Inside a burst of reads: replies wait for `readComplete()` to be handed over together.
    var reading = false
    /// Re-entrancy of ``writeReadyReplies()``: a nested call (a reply or a close made while
    /// writing) only asks for another round.
    private var pump = Pump.idle
    /// The work done in the current turn (``startTurn()``).
    var workDone = 0
    /// The configured kinds' names, as the context shares them, at the engine's kinds version
    /// they were read at.
    var kindNames = KindNames.none
    /// The kinds the peer was allowed under the rules version last seen.
    var allowedKinds = AllowedKinds()
    /// The replies owed, in request order; the first is request `firstSequence`'s.
    var pendingReplies = CircularBuffer<PendingReply>(initialCapacity: 8)
    var firstSequence = 0
    /// Splits what the connection reads into request lines.
    var framer = RequestFramer()
    /// Lines read while no more requests could be taken, in order.
    var deferred = DeferredInput()
    /// Where the connection is in its life, and which of its timers run.
    var machine: ConnectionStateMachine

    // What the rest of the connection's life uses.

    /// The clock a token's age is read on, at the head of the replies.
    let clock: any AgentClock
    let logger: Logger
    /// Whether the connection was admitted under the connection limits.
    let admission: ServerStatistics.Admission
    /// How long a segment descriptor may wait for the peer's socket to take it.
    let descriptorSendTimeout: TimeAmount
    /// The handles of the timers the machine says run.
    private var timers = TimerHandles()
    /// The tasks waiting for fetches on this connection's behalf, by request sequence: cancelled
    /// when the connection closes, so a fetch nobody waits for any more can be dropped.
    var waiting: [Int: Task<Void, Never>] = [:]
    /// The shared-memory descriptors this connection was sent and asked for (SHM).
    var descriptors = DescriptorLedger()
    /// The `WARM` fetches this connection may still have outstanding.
    let warmAllowance = WarmAllowance()

    private enum Pump {
        case idle
        case running
        /// Running, and asked for another round.
        case again
    }

    /// The timers' handles, by the machine's names for them, each with the number of its arming:
    /// a timer that ran out after it was cancelled, or replaced, finds another number and does
    /// nothing.
    private struct TimerHandles {
        private struct Slot {
            var handle: (any TransportTimer)?
            var arming: UInt32 = 0
        }

        private var partialLine = Slot()
        private var stall = Slot()
        private var pace = Slot()
        private var linger = Slot()

        private subscript(timer: ConnectionStateMachine.Timers) -> Slot {
            get {
                switch timer {
                case .partialLine: partialLine
                case .stall: stall
                case .pace: pace
                default: linger
                }
            }
            set {
                switch timer {
                case .partialLine: partialLine = newValue
                case .stall: stall = newValue
                case .pace: pace = newValue
                default: linger = newValue
                }
            }
        }

        /// Stops `timer`, if it runs.
        mutating func cancel(_ timer: ConnectionStateMachine.Timers) {
            self[timer].handle?.cancel()
            self[timer].handle = nil
            self[timer].arming &+= 1
        }

        /// The number the next arming of `timer` has (one that runs is stopped first).
        mutating func nextArming(_ timer: ConnectionStateMachine.Timers) -> UInt32 {
            cancel(timer)
            return self[timer].arming
        }

        /// Keeps `handle` as `timer`'s, armed under the number ``nextArming(_:)`` gave.
        mutating func keep(_ handle: any TransportTimer, for timer: ConnectionStateMachine.Timers) {
            self[timer].handle = handle
        }

        /// `timer` ran out: whether it is the arming still current (then it is forgotten).
        mutating func ranOut(_ timer: ConnectionStateMachine.Timers, arming: UInt32) -> Bool {
            guard self[timer].arming == arming else { return false }
            self[timer].handle = nil
            self[timer].arming &+= 1
            return true
        }
    }

    init(
        context: ConnectionContext,
        logger: Logger,
        admission: ServerStatistics.Admission = .admitted,
        peer: PeerCredentials? = nil,
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(30),
        lingerTime: TimeAmount = .seconds(1),
        descriptorSendTimeout: TimeAmount = DescriptorLedger.sendTimeout,
        clock: any AgentClock = SystemAgentClock()
    ) {
        self.context = context
        self.logger = logger
        self.admission = admission
        self.peer = peer
        self.descriptorSendTimeout = descriptorSendTimeout
        self.clock = clock
        machine = ConnectionStateMachine(
            requestTimeout: requestTimeout,
            stallTimeout: stallTimeout,
            lingerTime: lingerTime
        )
    }

    // MARK: Driving the machine

    /// Performs what the machine answered an event with.
    @inline(__always)
    func perform(_ actions: ConnectionStateMachine.Actions) {
        if !actions.cancel.isEmpty || !actions.arm.isEmpty { changeTimers(actions) }
        switch actions.step {
        case .none: return
        case .writeReplies: writeReadyReplies()
        case .writeRepliesInNewTurn:
            startTurn()
            writeReadyReplies()
        case .resumeReading: transport.read()
        case .closeAfterWritten:
            flushOutput(evenIfClosed: true)
            transport.whenWritten { [self] in perform(machine.allWritten()) }
        case .shutOutputAndLinger:
            transport.closeOutput()
            transport.read()
        case .close: transport.close()
        case .closeStalled:
            logger.info(
                "closing a connection that does not read its replies",
                metadata: PeerCredentials.logMetadata(peer).merging(
                    ["stall_timeout_s": "\(machine.stallTimeout.nanoseconds / 1_000_000_000)"],
                    uniquingKeysWith: { $1 }
                )
            )
            transport.close()
        case .partialLineTimedOut:
            logger.debug("partial request line timed out")
            // Counted under `other`.
            pendingReplies.append(.closingError(WireError(.badRequest, "request timed out")))
            writeReadyReplies()
        case .reportIllegal(let transition):
            logger.error("connection closed on an illegal transition", metadata: ["transition": "\(transition)"])
            transport.close()
        }
    }

    private func changeTimers(_ actions: ConnectionStateMachine.Actions) {
        for timer in ConnectionStateMachine.Timers.all {
            if actions.cancel.contains(timer) { timers.cancel(timer) }
            if actions.arm.contains(timer) {
                let arming = timers.nextArming(timer)
                let handle = transport.schedule(in: machine.delay(of: timer)) { [self] in
                    guard timers.ranOut(timer, arming: arming) else { return }
                    perform(machine.timerFired(timer, writable: transport.isWritable))
                }
                timers.keep(handle, for: timer)
            }
        }
    }

    // MARK: Inbound

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

    /// The bytes of one read, borrowed for the call: a plain GET at their front is answered from
    /// them where they are (as ``takeFrames()`` would answer it); the rest is kept and framed.
    func received(_ bytes: UnsafeRawBufferPointer) {
        guard machine.takesRequests else { return }
        framer.take(read: bytes) { mayTakeLineInPlace && takeSimpleGet($0) }
        // Every line was taken where it lay and answered: with nothing kept to frame, owed or
        // deferred, takeFrames() would find no frame and write nothing (a burst's replies go out
        // together at readComplete()), and inside a read the state machine has nothing to learn
        // from replies written (input has not ended, reading is not held).
        if !framer.holdsBytes, pendingReplies.isEmpty, deferred.isEmpty { return }
        takeFrames()
    }

    /// Whether a plain GET may be taken from where its bytes are now: the connection takes
    /// requests, may take another, and nothing waits before it.
    private var mayTakeLineInPlace: Bool { machine.takesRequests && deferred.isEmpty && canTakeRequest() }

    /// Takes every frame the bytes read so far hold, in order, while the connection takes
    /// requests; those it cannot take yet wait in `deferred`.
    func takeFrames() {
        while machine.takesRequests {
            // A plain GET is taken straight from the read's bytes while nothing waits before it
            // and another request may be taken; every other line is framed and taken below.
            if mayTakeLineInPlace, framer.takeLine({ takeSimpleGet($0) }) { continue }
            guard let frame = framer.next() else { break }
            take(frame)
        }
        writeReadyReplies()
    }

    func take(_ frame: RequestFrame) {
        // Inside a read burst: replies wait for `readComplete()` to be handed over together.
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
        // The common case, asked after every read: nothing kept.
        if deferred.isEmpty { return false }
        guard machine.takesRequests else {
            deferred.removeAll()
            return false
        }
        var took = false
        while machine.takesRequests, canTakeRequest(), let frame = deferred.next() {
            process(frame)
            took = true
        }
        return took
    }

    /// Whether another request may be taken now: fewer than ``maxPending`` replies owed, and the
    /// output under the transport's high-water mark (a cached GET's reply is encoded at once).
    func canTakeRequest() -> Bool {
        if output.readableBytes >= Self.outputFlushBytes { flushOutput() }
        return pendingReplies.count < Self.maxPending && transport.isWritable && !turnSpent
    }

    func process(_ frame: RequestFrame) {
        switch frame {
        case .partialLine:
            perform(machine.partialLineRead())
        case .tooLong:
            perform(machine.lineEnded())
            stopTakingRequests()
            // Counted under `other`, like a line that timed out.
            pendingReplies.append(.closingError(WireError(.badRequest, "line too long")))
        case .line(let line):
            perform(machine.lineEnded())
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

    /// A burst of reads ended: the replies it made ready are handed over together.
    func readComplete() {
        reading = false
        flushOutput()
    }

    /// The peer finished sending. (Events come outside read bursts, so what they make ready is
    /// written at once.)
    func inputEnded() {
        // The lines read before the end of input, and a last one without its LF, are
        // requests too.
        while machine.takesRequests, let frame = framer.next() { take(frame) }
        if machine.takesRequests, let last = framer.finish() { take(last) }
        reading = false
        // No read follows the end of input; the lines read before it are still answered.
        perform(machine.inputEnded())
    }

    /// Whether the transport may read more now. When it may not (too many replies owed, lines
    /// kept for later, or the output over its bound), reading is held until the replies written
    /// let it go on through ``ConnectionTransport/read()``. Closing, reading goes on: what the
    /// client still sends is dropped.
    func wantsToRead() -> Bool {
        if machine.isClosed { return true }
        if mayRead { return true }
        perform(machine.readingHeld())
        return false
    }

    /// Whether the replies owed, the lines kept and the output allow reading.
    private var mayRead: Bool {
        pendingReplies.count < Self.maxPending && deferred.isEmpty && transport.isWritable
    }

    /// Graceful shutdown: finish the replies owed, then close.
    func quiesce() {
        reading = false
        stopTakingRequests()
        writeReadyReplies()
    }

    /// The connection is closed.
    func inactive() {
        perform(machine.transportClosed())
        // Nobody will read these answers: the fetches they wait for may be dropped.
        for task in waiting.values { task.cancel() }
        waiting = [:]
        deferred.removeAll()
        closeUnsentDescriptors()
    }

    /// The connection failed: close it.
    func failed(_ error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        close()
    }

    /// Takes no more requests: the connection closes once every reply owed is written.
    func stopTakingRequests() {
        perform(machine.stop())
    }

    /// Closes after the last reply is written. Unless the client already finished sending, our
    /// side is shut first and what the client still sends is read and dropped for the linger
    /// time: closing with unread input would reset the connection and could destroy replies the
    /// client has not read yet.
    func close() {
        perform(machine.close())
    }

    // MARK: Turns

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
    private func continueIfSpent() {
        // The turn first: the one check a connection within its share pays.
        guard turnSpent, !deferred.isEmpty || pendingReplies.first?.isReady == true,
            machine.askContinuation()
        else {
            return
        }
        transport.continueLater { [self] in
            guard machine.continuationCame() else { return }
            startTurn()
            writeReadyReplies()
        }
    }

    // MARK: Outbound

    /// The output crossed its high- or low-water mark.
    func writabilityChanged() {
        perform(machine.writabilityChanged(writable: transport.isWritable))
    }

    func append(_ reply: PendingReply) {
        pendingReplies.append(reply)
    }

    /// Writes the replies at the head that are ready, in order, and takes the lines kept for
    /// later as far as it can; closes after QUIT, a too-long line, or end of input once nothing
    /// is owed.
    func writeReadyReplies() {
        guard case .idle = pump else {
            pump = .again
            return
        }
        pump = .running
        repeat {
            pump = .running
            writeReadyRepliesOnce()
            if processDeferred() { pump = .again }
        } while pump == .again && !machine.isClosed
        pump = .idle
        guard !machine.isClosed else { return }
        let nothingLeft = pendingReplies.isEmpty && deferred.isEmpty
        if !nothingLeft { continueIfSpent() }
        perform(machine.repliesWritten(nothingLeft: nothingLeft, mayRead: mayRead))
    }

    private func writeReadyRepliesOnce() {
        guard !machine.isClosed, !descriptors.sending else { return }
        // Replies that render much (a backlog of STATS or METRICS that a slow fetch at the head
        // held) go out a turn's worth at a time too; the rest wait for the connection's next turn.
        replies: while !turnSpent, let head = pendingReplies.first, head.isReady {
            // The output is bounded: while the peer leaves what it was sent unread, the rest waits.
            if !transport.isWritable { break }
            switch head {
            case .offer(let offer):
                // Everything before it is written first; the rest waits for the descriptor.
                sendDescriptor(offer)
                return
            case .token(let answer):
                guard let reply = checkedAtHead(answer) else { break replies }
                removeHead()
                write(reply, countedAs: answer.verb)
            case .reply(let reply, let verb):
                removeHead()
                write(reply, countedAs: verb)
            case .info, .metrics, .stats:
                if !paidForCostlyHead(head) { break replies }
                writeCostlyHead(head)
            case .quit:
                removeHead()
                context.requests.count(.quit, .ok)
                close()
                return
            case .closingError(let error):
                removeHead()
                write(.error(error), countedAs: .other)
                close()
                return
            }
            if output.readableBytes >= Self.outputFlushBytes { flushOutput() }
        }
        if !reading { flushOutput() }
    }

    /// Whether the costly reply at the head (`STATS`, `METRICS`, `INFO`) may be written now: its
    /// cost counted against the peer's uid (``CostlyReplyPacer``). Past the uid's budget, the
    /// pace timer brings the connection back when its turn comes, and it is written then.
    private func paidForCostlyHead(_ head: PendingReply) -> Bool {
        switch machine.costlyHead {
        case .paid: return true
        // Waiting for its turn: nothing else (a read, the output draining) writes it sooner.
        case .waiting: return false
        case .unpaid:
            // Its line and its rendering, as its turn counts it.
            let wait = context.costlyReplies.charge(peer?.uid, units: 1 + head.renderingCost)
            perform(machine.costlyHeadCharged(wait: wait))
            return wait <= .zero
        }
    }

    /// Writes the costly reply at the head, paid for.
    private func writeCostlyHead(_ head: PendingReply) {
        machine.costlyHeadWritten()
        removeHead()
        switch head {
        case .info(let kind, let id):
            switch context.engine.info(kind: kind, id: id) {
            case .failure(let failure): write(.error(failure.wireError), countedAs: .info)
            case .success(let info): write(.line(.ok(KeyInfoLine.text(info))), countedAs: .info)
            }
        case .metrics:
            encodeMetrics()
            context.requests.count(.metrics, .ok)
        case .stats:
            prepareOutput()
            context.status.writeStatsReply(into: &output)
            context.requests.count(.stats, .ok)
        default:
            break
        }
        spend(head.renderingCost)
    }

    /// The head's reply is written (or sent): the next request's is the head now.
    func removeHead() {
        pendingReplies.removeFirst()
        firstSequence += 1
    }

    /// Encodes `reply` and counts it under `verb`.
    private func write(_ reply: Reply, countedAs verb: RequestVerb) {
        encode(reply)
        context.requests.count(verb, Self.code(of: reply))
    }

    /// The reply of the token answer at the head, as it may be written now; `nil` when it waits
    /// for a fetch again. A token that aged under the serving floor while it waited behind
    /// slower replies is looked up again, and one checked under rules that have changed since is
    /// checked again.
    private func checkedAtHead(_ answer: TokenAnswer) -> Reply? {
        guard var reply = answer.reply else { return nil }
        if isStale(reply, answering: answer), let key = answer.key {
            // Never a token with under 10 s left: ask again now.
            switch context.engine.lookup(
                kind: key.kind,
                id: key.id,
                minValidity: key.minValidity,
                requester: peer?.uid
            ) {
            case .ready(let outcome):
                reply = Self.reply(outcome)
                if isStale(reply, answering: answer) {
                    reply = .error(WireError(.unavailable, "token expired while queued"))
                }
            case .pending(let wait):
                var waiting = answer
                waiting.reply = nil
                pendingReplies[pendingReplies.startIndex] = .token(waiting)
                deliver(wait, sequence: firstSequence)
                return nil
            }
        }
        if case .token = reply, answer.rulesVersion != context.access.version {
            // The rules changed while the reply waited (a fetch, or replies before it): the
            // token goes out only if they still allow this peer the kind.
            if let denied = context.access.check(peer, kind: answer.kind) { reply = .error(denied) }
        }
        return reply
    }

    /// Whether `reply` is a token that has aged under the serving floor while it waited behind
    /// slower replies (replies go out in request order): only an answer queued behind another
    /// keeps its key, and only such can.
    func isStale(_ reply: Reply, answering answer: TokenAnswer) -> Bool {
        guard case .token(let served) = reply, answer.key != nil else { return false }
        return Double(served.expiresAt) - clock.wallSeconds < context.engine.policy(for: answer.kind).servingFloor
    }

    /// The result code a reply is counted under.
    private static func code(of reply: Reply) -> ReplyCode {
        if case .line(.error(let error)) = reply { return ReplyCode(error.code) }
        return .ok
    }

    /// Hands what is encoded to the transport (closing: the last replies, once).
    func flushOutput(evenIfClosed: Bool = false) {
        guard !outputHandedOver, output.readableBytes > 0, evenIfClosed || !machine.isClosed else { return }
        // Lent, not handed over: the transport copies only what the socket does not take, and
        // calls nothing of the handler's before it returns, so `output` (which keeps the bytes)
        // stays as it is during the call. Neither is retained for it: the pointer is taken out
        // of `withUnsafeReadableBytes` on purpose, as the write inside it would retain `output`
        // (the compiler cannot tell the transport leaves it alone). A debug build checks that
        // the transport did.
        let bytes = output.withUnsafeReadableBytes { $0 }
        borrowedTransport!._withUnsafeGuaranteedRef { $0.transport.write(bytes) }
        assert(
            output.readableBytes == bytes.count
                && output.withUnsafeReadableBytes { $0.baseAddress } == bytes.baseAddress,
            "the transport changed the output it was lent"
        )
        outputHandedOver = true
    }
}

/// A handler's transport in a reference of its own, which `Unmanaged` can lend.
private final class TransportBox {
    let transport: any ConnectionTransport
    init(_ transport: any ConnectionTransport) { self.transport = transport }
}
