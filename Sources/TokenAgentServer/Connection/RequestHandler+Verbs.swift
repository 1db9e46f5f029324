// The verbs: each parsed request checked against the access rules in force and answered into its
// slot, at once or when its fetch ends. SHM and TOUCH are in
// SharedMemory/RequestHandler+SharedMemory.swift; a plain GET usually takes the fast path
// (RequestHandler+SimpleGet.swift) and never gets here.
import NIOCore
import TokenAgent
import TokenWire

extension RequestHandler {
    func handle(_ request: WireRequest) {
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
        case .shm(let kind, let layouts):
            var slot = shmSlot(kind: kind, layouts: layouts)
            slot.verb = .shm
            append(slot)
        case .touch(let kind, let ids):
            spend(ids.count * WorkCost.perID)
            touch(kind: kind, ids: ids)
            append(Slot(reply: .line(.ok("")), verb: verb))
        case .warm(let kind, let ids):
            // One decision per id (up to 64), each perhaps a fetch: the line costs its ids.
            spend(ids.count * WorkCost.perID)
            let reply: Reply
            switch engine.warm(kind: kind, ids: ids, requester: peer?.uid, allowance: warmAllowance) {
            case .success(let outcome): reply = .line(.ok("queued=\(outcome.queued) cached=\(outcome.cached)"))
            case .failure(let failure): reply = .error(failure.wireError)
            }
            append(Slot(reply: reply, verb: verb))
        case .get(let kind, let id, let minValidity):
            answer(
                engine.lookup(kind: kind, id: id, minValidity: minValidity, requester: peer?.uid),
                verb: verb,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, id, minValidity) }
            )
        case .refresh(let kind, let id, let refused):
            answer(
                engine.lookupRefresh(kind: kind, id: id, refusedToken: refused, requester: peer?.uid),
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
        let access = status.access
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
        // Only a reply queued behind another can age before it is written: only such a slot
        // keeps its key for the check at the head (no lock, clock read or copy for the others).
        let key = slots.isEmpty ? nil : key()
        switch lookup {
        case .ready(let outcome):
            append(Slot(reply: Self.reply(outcome), verb: verb, key: key, kind: kind, rulesVersion: rulesVersion))
        case .pending(let wait):
            append(Slot(verb: verb, key: key, kind: kind, rulesVersion: rulesVersion))
            deliver(wait, sequence: firstSequence + slots.count - 1)
        }
    }

    /// Fills the slot of request `sequence` when `wait` ends, and writes what is then ready.
    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        sequence: Int
    ) {
        waiting[sequence] = transport.deliver(wait) { [self] outcome in
            waiting[sequence] = nil
            let index = sequence - firstSequence
            guard !closed, index >= 0, index < slots.count else { return }
            slots[slots.index(slots.startIndex, offsetBy: index)].reply = Self.reply(outcome)
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
