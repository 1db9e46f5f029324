// The two clocks on a slow peer: a partial line that never ends, and replies left unread.
import Logging
import NIOCore
import TokenAgent
import TokenWire

extension RequestHandler {
    /// Starts the partial-line clock, unless reading is paused (then the client is not the one
    /// holding the line up) or it already runs.
    func startPartialTimer() {
        guard partialPending, partialTimer == nil, !readHeld, state.takesRequests else { return }
        partialTimer = transport.schedule(in: requestTimeout) { [self] in
            partialTimer = nil
            guard partialPending, state.takesRequests else { return }
            stopTakingRequests()
            logger.debug("partial request line timed out")
            append(.closingError(WireError(.badRequest, "request timed out")))
            // Counted under `other`.
            writeReadyReplies()
        }
    }

    func stopPartialTimer() {
        partialPending = false
        pausePartialTimer()
    }

    func pausePartialTimer() {
        partialTimer?.cancel()
        partialTimer = nil
    }

    /// Starts the clock on a peer that leaves its replies unread: once it runs out, the
    /// connection is closed, and what it was owed with it.
    func startStallTimer() {
        guard stallTimer == nil else { return }
        stallTimer = transport.schedule(in: stallTimeout) { [self] in
            stallTimer = nil
            guard !transport.isWritable else { return }
            logger.info(
                "closing a connection that does not read its replies",
                metadata: PeerCredentials.logMetadata(peer).merging(
                    ["stall_timeout_s": "\(stallTimeout.nanoseconds / 1_000_000_000)"],
                    uniquingKeysWith: { $1 }
                )
            )
            state = .closed
            transport.close()
        }
    }
}
