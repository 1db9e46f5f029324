import Logging
import NIOCore
import TokenAgent
import TokenSegment
import TokenWire

/// Asks a connection to finish the replies it owes and close (graceful shutdown).
struct QuiesceEvent: Sendable {}

/// Serves one connection: parses each line, asks the engine, and writes exactly one reply per
/// request in request order, however the answers arrive. Every buffer is bounded in bytes,
/// whatever the peer does: past ``maxPending`` owed replies the lines already read wait as bytes
/// (at most the reads made before reading paused) and reading stops; replies are encoded only
/// while the channel is writable (under its high-water mark), so a peer that does not read its
/// replies stops the connection instead of growing it, and is closed once it has stalled for the
/// stall time-out.
final class RequestHandler: ChannelDuplexHandler {
    typealias InboundIn = RequestFrame
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// A reply as it waits to be written: a served token (written from its stored bytes) or a line.
    enum Reply {
        case token(ServedToken)
        case line(WireReply)

        static func error(_ error: WireError) -> Reply { .line(.error(error)) }
    }

    /// A reply slot, in request order.
    struct Slot {
        var reply: Reply?
        /// A segment's descriptor to send with its reply line (SHM), by the handler's own `sendmsg`.
        var offer: SharedSegments.Offer?
        var closeAfter = false
        /// A STATS reply, made when its turn comes so it counts every request before it.
        var statsWhenDue = false
        /// A METRICS reply, made when its turn comes, like STATS.
        var metricsWhenDue = false
        /// An INFO reply about ``key``, made when its turn comes, so it tells what the requests
        /// before it brought.
        var infoWhenDue = false
        /// The verb the reply is counted under in `fleet_tokend_requests_total`.
        var verb = RequestVerb.other
        /// The key a token reply answers, so a token that aged past the serving floor while its
        /// reply waited behind slower ones can be looked up again (set only on a slot queued behind another).
        var key: (kind: String, id: String, minValidity: Int?)?
        /// The kind a token reply is for (GET, REFRESH), and the version of the access rules it
        /// was checked under: a token is written only if the rules in force then allow it.
        var kind: String?
        var rulesVersion = 0

        var isReady: Bool {
            reply != nil || closeAfter || statsWhenDue || metricsWhenDue || infoWhenDue || offer != nil
        }
    }

    /// The most requests answered-or-pending per connection before reading pauses.
    static let maxPending = 128

    let engine: TokenEngine
    private let clock: any AgentClock = SystemAgentClock()
    let status: AgentStatus
    let logger: Logger
    var slots = CircularBuffer<Slot>(initialCapacity: 8)
    var firstSequence = 0
    private var acceptingRequests = true
    private var inputClosed = false
    /// Graceful shutdown: close once every owed reply is written.
    private var finishing = false
    private var readHeld = false
    var closed = false
    /// The shared-memory descriptors this connection was sent and asked for (SHM).
    var descriptors = DescriptorLedger()

    /// Whether the connection was admitted under the connection limits.
    private let admission: ServerStatistics.Admission
    /// Who is at the other end; `nil` when the kernel could not tell.
    let peer: PeerCredentials?
    /// How long a partial line may wait for its end while reading.
    private let requestTimeout: TimeAmount
    /// A partial line waits for its end.
    private var partialPending = false
    private var partialTimer: Scheduled<Void>?
    /// Replies encoded since the last write; written once per read burst (or at once for replies
    /// that complete outside one). Reused: once the channel has written it, clearing it makes no copy.
    private var output = ByteBuffer()
    /// `output` was handed to the channel; clear it before encoding more.
    private var outputHandedOver = false
    /// Inside a burst of reads: replies wait for `channelReadComplete` to be written.
    private var reading = false
    /// The tasks waiting for fetches on this connection's behalf, by request sequence: cancelled
    /// when the connection closes, so a fetch nobody waits for any more can be dropped.
    private var waiting: [Int: Task<Void, Never>] = [:]
    /// Lines read while no more requests could be taken, in order.
    private var deferred = DeferredInput()
    /// Inside ``writeReadyReplies(context:)``: a nested call only asks for another round.
    private var pumping = false
    private var pumpAgain = false
    /// How long the peer may leave its replies unread (the channel unwritable) before it is closed.
    private let stallTimeout: TimeAmount
    private var stallTimer: Scheduled<Void>?
    /// The configured kind names and the engine's kinds version they were read at.
    private var kindNames: [(name: String, bytes: [UInt8])] = []
    private var kindNamesVersion = -1

    init(
        engine: TokenEngine,
        status: AgentStatus,
        logger: Logger,
        admission: ServerStatistics.Admission = .admitted,
        peer: PeerCredentials? = nil,
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(30)
    ) {
        self.engine = engine
        self.status = status
        self.logger = logger
        self.admission = admission
        self.peer = peer
        self.requestTimeout = requestTimeout
        self.stallTimeout = stallTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        output = context.channel.allocator.buffer(capacity: 4096)
    }

    func channelActive(context: ChannelHandlerContext) {
        context.fireChannelActive()
        let refusal: String
        switch admission {
        case .admitted: return
        case .tooManyConnections: refusal = "too many connections"
        case .tooManyForUID(let uid): refusal = "too many connections for uid \(uid)"
        }
        acceptingRequests = false
        slots.append(Slot(reply: .error(WireError(.busy, refusal)), closeAfter: true))
        writeReadyReplies(context: context)
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard acceptingRequests, !closed else { return }
        let frame = unwrapInboundIn(data)
        // Inside a read burst: replies wait for `channelReadComplete` to be written together.
        // (Lines taken later, from `deferred`, come outside one and are written at once.)
        if case .line = frame { reading = true }
        if deferred.isEmpty, canTakeRequest(context: context) {
            process(frame, context: context)
        } else {
            deferred.append(frame)
        }
        writeReadyReplies(context: context)
    }

    /// Takes the lines kept while no more requests could be, as far as the connection now can.
    /// Whether it took any.
    private func processDeferred(context: ChannelHandlerContext) -> Bool {
        guard acceptingRequests, !closed else {
            deferred.removeAll()
            return false
        }
        var took = false
        while acceptingRequests, !closed, canTakeRequest(context: context), let frame = deferred.next() {
            process(frame, context: context)
            took = true
        }
        return took
    }

    /// Whether another request may be taken now: fewer than ``maxPending`` replies owed, and the
    /// output under the channel's high-water mark (a cached GET's reply is encoded at once).
    private func canTakeRequest(context: ChannelHandlerContext) -> Bool {
        if output.readableBytes >= Self.outputFlushBytes { flushOutput(context: context) }
        return slots.count < Self.maxPending && context.channel.isWritable
    }

    private func process(_ frame: RequestFrame, context: ChannelHandlerContext) {
        switch frame {
        case .partialLine:
            partialPending = true
            startPartialTimer(context: context)
            return
        case .tooLong:
            stopPartialTimer()
            acceptingRequests = false
            append(Slot(reply: .error(WireError(.badRequest, "line too long")), closeAfter: true))
        // Counted under `other`, like a line that timed out.
        case .line(let line):
            stopPartialTimer()
            if !handleSimpleGet(line, context: context) {
                switch RequestParser.parse(line.readableBytesView) {
                case .failure(let error):
                    append(Slot(reply: .error(error), verb: RequestVerb(failedLine: line.readableBytesView)))
                case .success(let request): handle(request, context: context)
                }
            }
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        flushOutput(context: context)
        context.fireChannelReadComplete()
    }

    /// The fast path: a plain `GET` of a configured kind, recognised and looked up straight from
    /// the line's bytes; a cache hit allocates nothing. Returns `false` for any other line.
    private func handleSimpleGet(_ line: ByteBuffer, context: ChannelHandlerContext) -> Bool {
        line.withUnsafeReadableBytes { bytes -> Bool in
            guard let get = SimpleGet.recognise(bytes),
                let kind = configuredKind(UnsafeRawBufferPointer(rebasing: bytes[get.kind]))
            else {
                return false
            }
            // Read before the check: a reload after it makes the reply be checked again.
            let rulesVersion = status.access.version
            if let denied = status.access.check(peer, kind: kind) {
                append(Slot(reply: .error(denied), verb: .get))
                return true
            }
            let id = UnsafeRawBufferPointer(rebasing: bytes[get.id])
            // First in line, a cached token is written straight into the output from where the
            // agent keeps it (shared memory, mostly): its one copy. Behind another reply, it is
            // copied into the reply's slot.
            let first = slots.isEmpty
            var queued: ServedToken?
            let lookup = engine.lookup(kind: kind, idBytes: id, minValidity: get.minValidity, requester: peer?.uid) {
                token in
                if first {
                    prepareOutput()
                    Self.encodeToken(token.bytes, expiresAt: token.expiresAt, into: &output)
                } else {
                    queued = token.served
                }
            }
            if let lookup {
                answer(
                    lookup,
                    verb: .get,
                    kind: kind,
                    rulesVersion: rulesVersion,
                    key: { (kind, String(decoding: id, as: UTF8.self), get.minValidity) },
                    context: context
                )
            } else if let queued {
                append(
                    Slot(
                        reply: .token(queued),
                        verb: .get,
                        key: (kind, String(decoding: id, as: UTF8.self), get.minValidity),
                        kind: kind,
                        rulesVersion: rulesVersion
                    )
                )
            } else {
                status.metrics.requests.count(.get, .ok)
            }
            return true
        }
    }

    /// The configured kind named by `bytes`, as the engine's own string; `nil` when none is.
    private func configuredKind(_ bytes: UnsafeRawBufferPointer) -> String? {
        let version = engine.kindsVersion
        if version != kindNamesVersion {
            kindNames = engine.kinds.map { ($0, Array($0.utf8)) }
            kindNamesVersion = version
        }
        for kind in kindNames where kind.bytes.count == bytes.count {
            if kind.bytes.withUnsafeBytes({ $0.elementsEqual(bytes) }) { return kind.name }
        }
        return nil
    }

    private func handle(_ request: WireRequest, context: ChannelHandlerContext) {
        let verb = RequestVerb(request)
        // Read before the check: a reload after it makes a token reply be checked again.
        let rulesVersion = status.access.version
        if let denied = denial(of: request) {
            append(Slot(reply: .error(denied), verb: verb))
            return
        }
        switch request {
        case .ping:
            let stalled = status.health.refresherStalled
            append(
                Slot(reply: .line(stalled ? .error(WireError(.unavailable, "refresher stalled")) : .pong), verb: verb)
            )
        case .help: append(Slot(reply: .line(.ok(AgentStatus.helpText)), verb: verb))
        case .stats: append(Slot(statsWhenDue: true, verb: verb))
        case .metrics: append(Slot(metricsWhenDue: true, verb: verb))
        case .quit:
            acceptingRequests = false
            append(Slot(reply: nil, closeAfter: true, verb: verb))
        case .drop(let kind, let id):
            append(
                Slot(reply: engine.drop(kind: kind, id: id).map { .error($0.wireError) } ?? .line(.ok("")), verb: verb)
            )
        case .info(let kind, let id): append(Slot(infoWhenDue: true, verb: verb, key: (kind, id, nil)))
        case .shm(let kind):
            var slot = shmSlot(kind: kind)
            slot.verb = .shm
            append(slot)
        case .touch(let kind, let ids):
            touch(kind: kind, ids: ids)
            append(Slot(reply: .line(.ok("")), verb: verb))
        case .get(let kind, let id, let minValidity):
            answer(
                engine.lookup(kind: kind, id: id, minValidity: minValidity, requester: peer?.uid),
                verb: verb,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, id, minValidity) },
                context: context
            )
        case .refresh(let kind, let id, let refused):
            answer(
                engine.lookupRefresh(kind: kind, id: id, refusedToken: refused, requester: peer?.uid),
                verb: verb,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, id, nil) },
                context: context
            )
        }
    }

    /// Why the access rules in force refuse `request` from this peer, if they do: the kind's rules
    /// for GET, REFRESH, DROP and INFO; the admin list for DROP, INFO, STATS and METRICS.
    private func denial(of request: WireRequest) -> WireError? {
        let access = status.access
        switch request {
        case .ping, .help, .quit: return nil
        case .stats: return access.checkAdmin(peer, verb: "STATS")
        case .metrics: return access.checkAdmin(peer, verb: "METRICS")
        case .drop(let kind, _): return access.checkAdmin(peer, verb: "DROP") ?? access.check(peer, kind: kind)
        case .info(let kind, _): return access.checkAdmin(peer, verb: "INFO") ?? access.check(peer, kind: kind)
        case .get(let kind, _, _), .refresh(let kind, _, _), .shm(let kind): return access.check(peer, kind: kind)
        // Always answered OK: whether the peer may read the kind decides only whether it counts.
        case .touch: return nil
        }
    }

    // MARK: Slow clients

    /// Starts the partial-line clock, unless reading is paused (then the client is not the one
    /// holding the line up) or it already runs.
    private func startPartialTimer(context: ChannelHandlerContext) {
        guard partialPending, partialTimer == nil, !readHeld, !closed, acceptingRequests else { return }
        partialTimer = context.eventLoop.assumeIsolated().scheduleTask(in: requestTimeout) { [self] in
            partialTimer = nil
            guard partialPending, acceptingRequests, !closed else { return }
            acceptingRequests = false
            logger.debug("partial request line timed out")
            append(Slot(reply: .error(WireError(.badRequest, "request timed out")), closeAfter: true))
            // Counted under `other`.
            writeReadyReplies(context: context)
        }
    }

    private func stopPartialTimer() {
        partialPending = false
        pausePartialTimer()
    }

    private func pausePartialTimer() {
        partialTimer?.cancel()
        partialTimer = nil
    }

    private func answer(
        _ lookup: TokenEngine.Lookup,
        verb: RequestVerb,
        kind: String,
        rulesVersion: Int,
        key: () -> (kind: String, id: String, minValidity: Int?),
        context: ChannelHandlerContext
    ) {
        // Only a reply queued behind another can age before it is written: only such a slot
        // keeps its key for the check at the head (no lock, clock read or copy for the others).
        let key = slots.isEmpty ? nil : key()
        switch lookup {
        case .ready(let outcome):
            append(Slot(reply: Self.reply(outcome), verb: verb, key: key, kind: kind, rulesVersion: rulesVersion))
        case .pending(let wait):
            append(Slot(verb: verb, key: key, kind: kind, rulesVersion: rulesVersion))
            deliver(wait, sequence: firstSequence + slots.count - 1, context: context)
        }
    }

    /// Fills the slot of request `sequence` when `wait` ends, and writes what is then ready.
    private func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        sequence: Int,
        context: ChannelHandlerContext
    ) {
        let promise = context.eventLoop.makePromise(of: TokenEngine.Outcome.self)
        waiting[sequence] = promise.completeWithTask { await wait() }
        promise.futureResult.assumeIsolated().whenSuccess { [self] outcome in
            waiting[sequence] = nil
            let index = sequence - firstSequence
            guard !closed, index >= 0, index < slots.count else { return }
            slots[slots.index(slots.startIndex, offsetBy: index)].reply = Self.reply(outcome)
            writeReadyReplies(context: context)
        }
    }

    /// Whether `slot` holds a token that has aged under the serving floor while its reply waited
    /// behind slower replies (replies go out in request order).
    private func isStale(_ slot: Slot) -> Bool {
        guard case .token(let served) = slot.reply, slot.key != nil else { return false }
        return Double(served.expiresAt) - clock.wallSeconds < engine.policy.servingFloor
    }

    private static func reply(_ outcome: TokenEngine.Outcome) -> Reply {
        switch outcome {
        case .success(let token): return .token(token)
        case .failure(let failure): return .error(failure.wireError)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Events come outside read bursts (end of input may deliver a last line after the
        // burst's end): what they make ready is written at once.
        reading = false
        if let event = event as? ChannelEvent, event == .inputClosed {
            inputClosed = true
            if closed {
                // Lingering after our last reply: the client has read it and closed its side.
                context.close(promise: nil)
                return
            }
            // No read follows the end of input; the lines read before it are still answered.
            writeReadyReplies(context: context)
        } else if event is QuiesceEvent {
            acceptingRequests = false
            finishing = true
            writeReadyReplies(context: context)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed = true
        // Nobody will read these answers: the fetches they wait for may be dropped.
        for task in waiting.values { task.cancel() }
        waiting = [:]
        pausePartialTimer()
        stallTimer?.cancel()
        stallTimer = nil
        deferred.removeAll()
        closeUnsentDescriptors()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("connection error", metadata: ["error": "\(error)"])
        close(context: context)
    }

    // MARK: Outbound and back-pressure

    func read(context: ChannelHandlerContext) {
        if closed {
            context.read()  // lingering: keep draining what the client still sends
        } else if slots.count >= Self.maxPending || !deferred.isEmpty || !context.channel.isWritable {
            readHeld = true
            pausePartialTimer()
        } else {
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            stallTimer?.cancel()
            stallTimer = nil
            writeReadyReplies(context: context)
        } else {
            startStallTimer(context: context)
        }
        context.fireChannelWritabilityChanged()
    }

    /// Starts the clock on a peer that leaves its replies unread: once it runs out, the
    /// connection is closed, and what it was owed with it.
    private func startStallTimer(context: ChannelHandlerContext) {
        guard stallTimer == nil else { return }
        stallTimer = context.eventLoop.assumeIsolated().scheduleTask(in: stallTimeout) { [self] in
            stallTimer = nil
            guard !context.channel.isWritable else { return }
            logger.info(
                "closing a connection that does not read its replies",
                metadata: [
                    "peer_uid": "\(peer?.uid ?? UInt32.max)", "peer_pid": "\(peer?.pid ?? -1)",
                    "stall_timeout_s": "\(stallTimeout.nanoseconds / 1_000_000_000)",
                ]
            )
            closed = true
            acceptingRequests = false
            context.close(promise: nil)
        }
    }

    private func append(_ slot: Slot) {
        slots.append(slot)
    }

    /// Writes the replies at the head that are ready, in order, and takes the lines kept for
    /// later as far as it can; closes after QUIT, a too-long line, or end of input once nothing
    /// is owed.
    func writeReadyReplies(context: ChannelHandlerContext) {
        guard !pumping else {
            pumpAgain = true
            return
        }
        pumping = true
        defer { pumping = false }
        repeat {
            pumpAgain = false
            writeReadyRepliesOnce(context: context)
            if processDeferred(context: context) { pumpAgain = true }
        } while pumpAgain && !closed
        guard !closed else { return }
        if inputClosed || finishing, slots.isEmpty, deferred.isEmpty {
            close(context: context)
            return
        }
        resumeReadingIfPossible(context: context)
    }

    private func writeReadyRepliesOnce(context: ChannelHandlerContext) {
        guard !closed, !descriptors.sending else { return }
        while var head = slots.first, head.isReady {
            // The output is bounded: while the peer leaves what it was sent unread, the rest waits.
            if !context.channel.isWritable { break }
            if let offer = head.offer {
                // Everything before it is written first; the rest waits for the descriptor.
                sendDescriptor(offer, context: context)
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
                    deliver(wait, sequence: firstSequence, context: context)
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
            } else if head.metricsWhenDue {
                encodeMetrics()
                status.metrics.requests.count(head.verb, .ok)
            } else if let reply = head.statsWhenDue ? .line(.ok(status.statsText())) : head.reply {
                encode(reply)
                status.metrics.requests.count(head.verb, Self.code(of: reply))
            } else if head.verb == .quit {
                status.metrics.requests.count(.quit, .ok)
            }
            if head.closeAfter {
                close(context: context)
                return
            }
            if output.readableBytes >= Self.outputFlushBytes { flushOutput(context: context) }
        }
        if !reading { flushOutput(context: context) }
    }

    /// The result code a reply is counted under.
    private static func code(of reply: Reply) -> ReplyCode {
        if case .line(.error(let error)) = reply { return ReplyCode(error.code) }
        return .ok
    }

    /// Makes the output ready for more replies: cleared once the channel has taken what it held.
    private func prepareOutput() {
        if outputHandedOver {
            output.clear()
            outputHandedOver = false
        }
    }

    /// Appends the METRICS reply: the exposition and its `# EOF` line.
    private func encodeMetrics() {
        prepareOutput()
        output.writeBytes(status.metricsReply())
    }

    /// Output is written before it grows past this, even inside a read burst.
    static let outputFlushBytes = 32 * 1024

    /// Appends `reply` to the output: a token as `OK `, its stored bytes, a space, the expiry in
    /// decimal and LF, with no intermediate string.
    private func encode(_ reply: Reply) {
        prepareOutput()
        switch reply {
        case .token(let served): Self.encodeToken(served, into: &output)
        case .line(let line): output.writeString(line.line)
        }
    }

    /// `OK <token> <expires-at>` and LF, written in one reservation of the buffer: the token's
    /// stored bytes copied once, the expiry's digits written in place.
    static func encodeToken(_ served: ServedToken, into output: inout ByteBuffer) {
        var token = served.token
        token.withUTF8 { encodeToken(UnsafeRawBufferPointer($0), expiresAt: served.expiresAt, into: &output) }
    }

    /// `OK <token> <expires-at>` and LF for a token given as its bytes.
    static func encodeToken(_ tokenBytes: UnsafeRawBufferPointer, expiresAt: Int64, into output: inout ByteBuffer) {
        let digits = decimalLength(expiresAt)
        let length = 3 + tokenBytes.count + 1 + digits + 1
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            raw[0] = UInt8(ascii: "O")
            raw[1] = UInt8(ascii: "K")
            raw[2] = UInt8(ascii: " ")
            UnsafeMutableRawBufferPointer(rebasing: raw[3..<(3 + tokenBytes.count)]).copyMemory(from: tokenBytes)
            var index = 3 + tokenBytes.count
            raw[index] = UInt8(ascii: " ")
            index += 1
            var magnitude = expiresAt.magnitude
            if expiresAt < 0 { raw[index] = UInt8(ascii: "-") }
            var digit = index + digits - 1
            repeat {
                raw[digit] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
                digit -= 1
            } while magnitude > 0
            raw[index + digits] = UInt8(ascii: "\n")
            return length
        }
    }

    /// The number of characters `value` takes in decimal, its sign included.
    static func decimalLength(_ value: Int64) -> Int {
        var magnitude = value.magnitude
        var count = value < 0 ? 2 : 1
        while magnitude >= 10 {
            magnitude /= 10
            count += 1
        }
        return count
    }

    /// Succeeds once every reply handed to the channel so far is written: writes complete in
    /// order, so an empty write after them completes after them.
    func writesDrained(context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)))
    }

    /// Hands what is encoded to the channel and flushes.
    func flushOutput(context: ChannelHandlerContext) {
        guard !outputHandedOver, output.readableBytes > 0, !closed else { return }
        context.writeAndFlush(wrapOutboundOut(output), promise: nil)
        outputHandedOver = true
    }

    private func resumeReadingIfPossible(context: ChannelHandlerContext) {
        guard readHeld, !closed, slots.count < Self.maxPending, deferred.isEmpty, context.channel.isWritable else {
            return
        }
        readHeld = false
        startPartialTimer(context: context)
        context.read()
    }

    /// Closes after the last reply is written. Unless the client already finished sending, our
    /// side is shut first and what the client still sends is read and dropped for up to a second:
    /// closing with unread input would reset the connection and could destroy replies the client
    /// has not read yet.
    func close(context: ChannelHandlerContext) {
        guard !closed else { return }
        flushOutput(context: context)
        closed = true
        acceptingRequests = false
        pausePartialTimer()
        let linger = !inputClosed
        writesDrained(context: context).assumeIsolated().whenComplete { _ in
            guard linger else {
                context.close(promise: nil)
                return
            }
            let outputClosed = context.eventLoop.makePromise(of: Void.self)
            context.close(mode: .output, promise: outputClosed)
            outputClosed.futureResult.assumeIsolated().whenFailure { _ in context.close(promise: nil) }
            context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(1)) { context.close(promise: nil) }
            context.read()
        }
    }
}
