// The connection's outbound side: ordered replies written while the transport is writable,
// back-pressure on reading, and closing.
import Logging
import NIOCore
import TokenAgent
import TokenSegment
import TokenWire

extension RequestHandler {
    /// Whether the transport may read more now. When it may not (too many replies owed, lines
    /// kept for later, or the output over its bound), reading is held until
    /// ``resumeReadingIfPossible()`` lets it go on through ``ConnectionTransport/read()``.
    /// Lingering after the last reply, reading goes on: what the client still sends is dropped.
    func wantsToRead() -> Bool {
        if state.isClosed { return true }
        if pendingReplies.count >= Self.maxPending || !deferred.isEmpty || !transport.isWritable {
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

    func append(_ reply: PendingReply) {
        pendingReplies.append(reply)
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
        } while pumpAgain && !state.isClosed
        guard !state.isClosed else { return }
        if inputClosed || state == .finishing, pendingReplies.isEmpty, deferred.isEmpty {
            close()
            return
        }
        continueIfSpent()
        resumeReadingIfPossible()
    }

    func writeReadyRepliesOnce() {
        guard !state.isClosed, !descriptors.sending else { return }
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
    /// cost counted against the peer's uid (``CostlyReplyPacer``). Past the uid's budget, a timer
    /// brings the connection back when its turn comes, and it is written then, as paid.
    private func paidForCostlyHead(_ head: PendingReply) -> Bool {
        // Waiting for its turn: nothing else (a read, the output draining) writes it sooner.
        if paceTimer != nil { return false }
        if costlyHeadPaid { return true }
        // Its line and its rendering, as its turn counts it.
        let wait = context.costlyReplies.charge(peer?.uid, units: 1 + head.renderingCost)
        costlyHeadPaid = true
        guard wait > .zero else { return true }
        paceTimer = transport.schedule(in: wait) { [self] in
            paceTimer = nil
            guard !state.isClosed else { return }
            startTurn()
            writeReadyReplies()
        }
        return false
    }

    /// Writes the costly reply at the head, paid for.
    private func writeCostlyHead(_ head: PendingReply) {
        costlyHeadPaid = false
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

    /// Output is written before it grows past this, even inside a read burst.
    static let outputFlushBytes = 32 * 1024

    /// Hands what is encoded to the transport.
    func flushOutput() {
        guard !outputHandedOver, output.readableBytes > 0, !state.isClosed else { return }
        transport.write(output)
        outputHandedOver = true
    }

    func resumeReadingIfPossible() {
        guard readHeld, !state.isClosed, pendingReplies.count < Self.maxPending, deferred.isEmpty, transport.isWritable
        else {
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
        guard !state.isClosed else { return }
        flushOutput()
        state = .closing
        pausePartialTimer()
        let transport = self.transport!
        transport.whenWritten { [self] in
            // The client finished sending (before the close, or while the last replies were
            // written): nothing to drain.
            guard !inputClosed else {
                transport.close()
                return
            }
            if state == .closing { state = .lingering }
            transport.closeOutput()
            _ = transport.schedule(in: .seconds(1)) { transport.close() }
            transport.read()
        }
    }
}
