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

    func writeReadyRepliesOnce() {
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
            } else if head.statsWhenDue {
                prepareOutput()
                status.writeStatsReply(into: &output)
                status.metrics.requests.count(head.verb, .ok)
                spend(WorkCost.stats)
            } else if let reply = head.reply {
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
    func isStale(_ slot: Slot) -> Bool {
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

    func resumeReadingIfPossible() {
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
