import Dispatch
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

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
