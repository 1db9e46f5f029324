import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension FleetTokenClient {
    /// Sends `request` and returns its reply; retries on a new connection while the agent is
    /// unreachable, up to the reconnect deadline. `ERR` replies are thrown. A time-out retires the
    /// connection: replies come in order, so later calls must not queue behind the late one.
    nonisolated(nonsending) func exchange(_ request: WireRequest) async throws(FleetTokenError) -> WireReply {
        let (reply, descriptor) = try await exchangeReceiving(request)
        if let descriptor { close(descriptor) }
        return reply
    }

    /// ``exchange(_:)``, with the descriptor that came with the reply (`SHM`), which the caller
    /// closes.
    nonisolated(nonsending) func exchangeReceiving(
        _ request: WireRequest
    ) async throws(FleetTokenError) -> (WireReply, Int32?) {
        try Self.validate(request)
        requests.add(1, ordering: .relaxed)
        let clock = ContinuousClock()
        let callDeadline = clock.now.advanced(by: .milliseconds(Int64(saturating: configuration.callTimeout * 1000)))
        var unreachableSince: ContinuousClock.Instant?
        var pause = Duration.milliseconds(10)
        var resent = false
        while true {
            let problem: String
            switch await attempt(request, timeout: Self.seconds(clock.now.duration(to: callDeadline))) {
            case .answered(let reply, let descriptor): return (reply, descriptor)
            case .failed(let error): throw error
            case .retry(let reason): problem = reason
            case .sendElsewhere:
                // Once at once (the usual case: a retired connection); then as any other failure.
                problem = "connection closed"
                if !resent {
                    resent = true
                    continue
                }
            }
            let now = clock.now
            let since = unreachableSince ?? now
            unreachableSince = since
            let giveUp = min(
                callDeadline,
                since.advanced(by: .milliseconds(Int64(saturating: configuration.reconnectDeadline * 1000)))
            )
            if now.advanced(by: pause) > giveUp {
                // The call's own deadline ran out first: that is a time-out, whatever the last try met.
                if giveUp == callDeadline,
                    callDeadline
                        < since.advanced(by: .milliseconds(Int64(saturating: configuration.reconnectDeadline * 1000)))
                {
                    throw .timedOut("no reply within \(configuration.callTimeout) s")
                }
                throw .agentUnreachable("\(problem) (socket \(socketPath))")
            }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(200))
        }
    }

    private enum Attempt {
        case answered(WireReply, Int32?)
        case failed(FleetTokenError)
        case retry(String)
        /// The connection was closed or retired before the request was written.
        case sendElsewhere
    }

    /// Sends `request` once, on an open connection.
    private nonisolated(nonsending) func attempt(_ request: WireRequest, timeout: Double) async -> Attempt {
        let connection: AgentConnection
        do {
            connection = try await pool.connection()
        } catch {
            return .retry(error.description)
        }
        switch await connection.exchange(request, timeout: timeout) {
        case .reply(.error(let error)):
            return .failed(FleetTokenError(error))
        case .reply(let reply):
            return .answered(reply, nil)
        case .replyWithDescriptor(.error(let error), let descriptor):
            close(descriptor)
            return .failed(FleetTokenError(error))
        case .replyWithDescriptor(let reply, let descriptor):
            return .answered(reply, descriptor)
        case .timedOut:
            connection.retire()
            pool.discardClosed()
            return .failed(.timedOut("no reply within \(configuration.callTimeout) s"))
        case .lost(let reason):
            pool.discardClosed()
            return .retry(reason)
        case .invalidReply(let reason):
            pool.discardClosed()
            return .failed(.invalidReply("\(reason) (socket \(socketPath))"))
        case .notSent:
            pool.discardClosed()
            return .sendElsewhere
        }
    }

    /// Throws what the agent would answer to a request it cannot parse, without sending it (an id
    /// with a space would split the request). A GET of a plain ASCII kind and id is checked in
    /// place; anything else is parsed by `RequestParser`.
    static func validate(_ request: WireRequest) throws(FleetTokenError) {
        if case .get(let kind, let id, let minValidity) = request, isPlainKind(kind), isPlainID(id),
            minValidity.map({ (0...WireLimits.maxMinValiditySeconds).contains($0) }) ?? true
        {
            return
        }
        if case .failure(let error) = RequestParser.parse(text: request.line) { throw FleetTokenError(error) }
    }

    /// Whether `kind` is 1 to 32 of `a-z`, `0-9` and `-` (``TokenIdentifier/isWellFormedKind(_:)``).
    private static func isPlainKind(_ kind: String) -> Bool {
        var count = 0
        for byte in kind.utf8 {
            count += 1
            guard count <= WireLimits.maxKindBytes,
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x2D
            else { return false }
        }
        return count > 0
    }

    /// Whether `id` is 1 to 64 printable ASCII characters other than space and `/ : \ ? #`, and
    /// not `*`, `.` or `..`: a valid id by ``TokenIdentifier/problem(withID:)`` without looking at
    /// Unicode properties.
    private static func isPlainID(_ id: String) -> Bool {
        var count = 0
        for byte in id.utf8 {
            count += 1
            guard count <= WireLimits.maxIDScalars, byte > 0x20, byte < 0x7F else { return false }
            switch byte {
            case UInt8(ascii: "/"), UInt8(ascii: ":"), UInt8(ascii: "\\"), UInt8(ascii: "?"), UInt8(ascii: "#"):
                return false
            default: continue
            }
        }
        return count > 0 && !TokenIdentifier.isReserved(id.utf8)
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
