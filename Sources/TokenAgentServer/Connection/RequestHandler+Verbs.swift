// The verbs: each parsed request checked against the access rules in force and answered into its
// pending reply, at once or when its fetch ends. SHM and TOUCH are in
// SharedMemory/RequestHandler+SharedMemory.swift; a plain GET usually takes the fast path
// (RequestHandler+SimpleGet.swift) and never gets here.
import NIOCore
import TokenAgent
import TokenWire

extension RequestHandler {
    func handle(_ request: WireRequest) {
        let verb = RequestVerb(request)
        // Read before the check: a reload after it makes a token reply be checked again.
        let rulesVersion = context.access.version
        if let denied = denial(of: request) {
            append(.reply(.error(denied), verb: verb))
            return
        }
        switch request {
        case .ping:
            if let waiting = context.access.notConfiguredError {
                append(.reply(.error(waiting), verb: verb))
                return
            }
            let stalled = context.health.refresherStalled
            append(.reply(.line(stalled ? .error(WireError(.unavailable, "refresher stalled")) : .pong), verb: verb))
        case .help: append(.reply(.line(.ok(AgentStatus.helpText)), verb: verb))
        case .stats: append(.stats)
        case .metrics: append(.metrics)
        case .quit:
            stopTakingRequests()
            append(.quit)
        case .drop(let kind, let id):
            append(
                .reply(
                    context.engine.drop(kind: kind, id: id).map { .error($0.wireError) } ?? .line(.ok("")),
                    verb: verb
                )
            )
        case .info(let kind, let id): append(.info(kind: kind, id: id))
        case .shm(let kind, _): append(shmReply(kind: kind))
        case .touch(let kind, let ids):
            spend(ids.count * WorkCost.perID)
            touch(kind: kind, ids: ids)
            append(.reply(.line(.ok("")), verb: verb))
        case .warm(let kind, let ids):
            // One decision per id (up to 64), each perhaps a fetch: the line costs its ids.
            spend(ids.count * WorkCost.perID)
            let reply: Reply
            switch context.engine.warm(kind: kind, ids: ids, requester: peer?.uid, allowance: warmAllowance) {
            case .success(let outcome): reply = .line(.ok("queued=\(outcome.queued) cached=\(outcome.cached)"))
            case .failure(let failure): reply = .error(failure.wireError)
            }
            append(.reply(reply, verb: verb))
        case .get(let kind, let id, let minValidity):
            answer(
                context.engine.lookup(kind: kind, id: id, minValidity: minValidity, requester: peer?.uid),
                verb: verb,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, id, minValidity) }
            )
        case .refresh(let kind, let id, let refused):
            answer(
                context.engine.lookupRefresh(kind: kind, id: id, refusedToken: refused, requester: peer?.uid),
                verb: verb,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, id, nil) }
            )
        }
    }

    /// Why the access rules in force refuse `request` from this peer, if they do: the kind's rules
    /// for GET, REFRESH, WARM, SHM, DROP and INFO; the admin list for DROP, INFO, STATS and METRICS.
    private func denial(of request: WireRequest) -> WireError? {
        let access = context.access
        switch request {
        case .ping, .help, .quit: return nil
        case .stats: return access.checkAdmin(peer, verb: "STATS")
        case .metrics: return access.checkAdmin(peer, verb: "METRICS")
        case .drop(let kind, _): return access.checkAdmin(peer, verb: "DROP") ?? access.check(peer, kind: kind)
        case .info(let kind, _): return access.checkAdmin(peer, verb: "INFO") ?? access.check(peer, kind: kind)
        case .get(let kind, _, _), .refresh(let kind, _, _), .shm(let kind, _), .warm(let kind, _):
            return access.check(peer, kind: kind)
        // Always answered OK: whether the peer may read the kind decides only whether it counts.
        case .touch: return nil
        }
    }

    func answer(
        _ lookup: TokenEngine.Lookup,
        verb: RequestVerb,
        kind: String,
        rulesVersion: Int,
        key: () -> (kind: String, id: String, minValidity: Int?)
    ) {
        // Only a reply queued behind another can age before it is written: only such an answer
        // keeps its key for the check at the head (no lock, clock read or copy for the others).
        let key = pendingReplies.isEmpty ? nil : key()
        switch lookup {
        case .ready(let outcome):
            append(
                .token(
                    TokenAnswer(
                        reply: Self.reply(outcome),
                        verb: verb,
                        key: key,
                        kind: kind,
                        rulesVersion: rulesVersion
                    )
                )
            )
        case .pending(let wait):
            append(.token(TokenAnswer(reply: nil, verb: verb, key: key, kind: kind, rulesVersion: rulesVersion)))
            deliver(wait, sequence: firstSequence + pendingReplies.count - 1)
        }
    }

    /// Fills in the token answer of request `sequence` when `wait` ends, and writes what is then
    /// ready.
    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        sequence: Int
    ) {
        waiting[sequence] = transport.deliver(wait) { [self] outcome in
            waiting[sequence] = nil
            let index = sequence - firstSequence
            guard !machine.isClosed, index >= 0, index < pendingReplies.count,
                case .token(var answer) = pendingReplies[
                    pendingReplies.index(pendingReplies.startIndex, offsetBy: index)
                ]
            else { return }
            answer.reply = Self.reply(outcome)
            pendingReplies[pendingReplies.index(pendingReplies.startIndex, offsetBy: index)] = .token(answer)
            writeReadyReplies()
        }
    }

    static func reply(_ outcome: TokenEngine.Outcome) -> Reply {
        switch outcome {
        case .success(let token): return .token(token)
        case .failure(let failure): return .error(failure.wireError)
        }
    }
}
