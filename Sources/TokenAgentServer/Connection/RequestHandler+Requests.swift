// What requests mean: each line recognised (the GET fast path, or parsed), checked against the
// access rules in force, answered by the engine into its pending reply, and encoded. The
// connection's life (RequestHandler.swift, ConnectionStateMachine) is apart; SHM and TOUCH are in
// SharedMemory/RequestHandler+SharedMemory.swift.
import NIOCore
import TokenAgent
import TokenWire

extension RequestHandler {
    // MARK: Verbs

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

    // MARK: The GET fast path

    /// The fast path: a plain `GET` of a configured kind, recognised and looked up straight from
    /// the line's bytes; a cache hit allocates nothing. Returns `false` for any other line.
    func handleSimpleGet(_ line: ByteBuffer) -> Bool {
        line.withUnsafeReadableBytes { bytes -> Bool in
            guard let (get, kind) = simpleGet(in: bytes) else { return false }
            serveSimpleGet(get, kind: kind, line: bytes)
            return true
        }
    }

    /// Takes `line`, a whole line still in the read's buffer, if it is a plain `GET` of a
    /// configured kind, as ``take(_:)`` takes a line frame (the connection may take a request);
    /// `false`, with nothing done, for any other line.
    func takeSimpleGet(_ line: UnsafeRawBufferPointer) -> Bool {
        guard let (get, kind) = simpleGet(in: line) else { return false }
        reading = true
        perform(machine.lineEnded())
        spend(1)
        serveSimpleGet(get, kind: kind, line: line)
        if !pendingReplies.isEmpty { writeReadyReplies() }
        return true
    }

    /// `line` as a plain `GET` of a configured kind, with the engine's own name of the kind;
    /// `nil` for any other line.
    private func simpleGet(in line: UnsafeRawBufferPointer) -> (SimpleGet, String)? {
        guard let get = SimpleGet.recognise(line),
            let kind = configuredKind(UnsafeRawBufferPointer(rebasing: line[get.kind]))
        else {
            return nil
        }
        return (get, kind)
    }

    /// Answers the plain `GET` `get` of `kind` in `bytes`, its line.
    private func serveSimpleGet(_ get: SimpleGet, kind: String, line bytes: UnsafeRawBufferPointer) {
        // Read before the check: a reload after it makes the reply be checked again.
        let rulesVersion = context.access.version
        if !allowedKinds.allows(kind, version: rulesVersion) {
            if let denied = context.access.check(peer, kind: kind) {
                append(.reply(.error(denied), verb: .get))
                return
            }
            allowedKinds.remember(kind, version: rulesVersion)
        }
        let id = UnsafeRawBufferPointer(rebasing: bytes[get.id])
        // First in line, a cached token is written straight into the output from where the
        // agent keeps it (shared memory, mostly): its one copy. Behind another reply, it is
        // copied into its pending reply.
        let first = pendingReplies.isEmpty
        var queued: ServedToken?
        let inPlace = context.engine.lookup(
            kind: kind,
            idBytes: id,
            minValidity: get.minValidity,
            requester: peer?.uid
        ) {
            token in
            if first {
                prepareOutput()
                Self.encodeToken(token.bytes, expiresAt: token.expiresAt, into: &output)
            } else {
                queued = token.served
            }
        }
        if case .answer(let lookup) = inPlace {
            answer(
                lookup,
                verb: .get,
                kind: kind,
                rulesVersion: rulesVersion,
                key: { (kind, String(decoding: id, as: UTF8.self), get.minValidity) }
            )
        } else if let queued {
            append(
                .token(
                    TokenAnswer(
                        reply: .token(queued),
                        verb: .get,
                        key: (kind, String(decoding: id, as: UTF8.self), get.minValidity),
                        kind: kind,
                        rulesVersion: rulesVersion
                    )
                )
            )
        } else {
            context.requests.count(.get, .ok)
        }
    }

    /// The configured kind named by `bytes`, as the engine's own string; `nil` when none is.
    private func configuredKind(_ bytes: UnsafeRawBufferPointer) -> String? {
        if context.engine.kindsVersion != kindNames.version { kindNames = context.kindNames.names(of: context.engine) }
        return kindNames.name(of: bytes)
    }

    // MARK: Encoding

    /// Makes the output ready for more replies: cleared once the channel has taken what it held.
    func prepareOutput() {
        if outputHandedOver {
            output.clear()
            outputHandedOver = false
        }
    }

    /// Appends the METRICS reply: the exposition and its `# EOF` line.
    func encodeMetrics() {
        prepareOutput()
        output.writeBytes(context.status.metricsReply())
    }

    /// Appends `reply` to the output: a token as `OK `, its stored bytes, a space, the expiry in
    /// decimal and LF, with no intermediate string.
    func encode(_ reply: Reply) {
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

    /// `OK <token> <expires-at>` and LF for a token given as its bytes, written through the
    /// reservation's pointer: one copy of the token, the expiry's digits from the last one back.
    static func encodeToken(_ tokenBytes: UnsafeRawBufferPointer, expiresAt: Int64, into output: inout ByteBuffer) {
        let digits = decimalLength(expiresAt)
        let length = 3 + tokenBytes.count + 1 + digits + 1
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { raw in
            let out = raw.baseAddress!
            out.storeBytes(of: UInt8(ascii: "O"), as: UInt8.self)
            out.storeBytes(of: UInt8(ascii: "K"), toByteOffset: 1, as: UInt8.self)
            out.storeBytes(of: UInt8(ascii: " "), toByteOffset: 2, as: UInt8.self)
            if let token = tokenBytes.baseAddress { (out + 3).copyMemory(from: token, byteCount: tokenBytes.count) }
            let space = 3 + tokenBytes.count
            out.storeBytes(of: UInt8(ascii: " "), toByteOffset: space, as: UInt8.self)
            if expiresAt < 0 { out.storeBytes(of: UInt8(ascii: "-"), toByteOffset: space + 1, as: UInt8.self) }
            // The digits two at a time (one division by 100 a pair, its two digits copied from
            // a table of pairs), from the last one back.
            let pairs = UnsafeRawPointer(Self.digitPairs.utf8Start)
            var magnitude = expiresAt.magnitude
            var last = space + digits
            while magnitude >= 100 {
                let (quotient, pair) = magnitude.quotientAndRemainder(dividingBy: 100)
                (out + last - 1).copyMemory(from: pairs + Int(pair) &* 2, byteCount: 2)
                magnitude = quotient
                last -= 2
            }
            if magnitude >= 10 {
                (out + last - 1).copyMemory(from: pairs + Int(magnitude) &* 2, byteCount: 2)
            } else {
                out.storeBytes(of: UInt8(ascii: "0") &+ UInt8(magnitude), toByteOffset: last, as: UInt8.self)
            }
            out.storeBytes(of: UInt8(ascii: "\n"), toByteOffset: length - 1, as: UInt8.self)
            return length
        }
    }

    /// "00", "01" ... "99": the two digits of each number under 100, in constant memory (a
    /// literal, read through its pointer: no array, no retain, no lazy initialisation).
    static var digitPairs: StaticString {
        // swift-format-ignore
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"
    }

    /// The number of characters `value` takes in decimal, its sign included.
    static func decimalLength(_ value: Int64) -> Int {
        // Every Unix time from 2001 to 2286 has ten digits: the expiries written, nearly always.
        if value >= 1_000_000_000, value < 10_000_000_000 { return 10 }
        var magnitude = value.magnitude
        var count = value < 0 ? 2 : 1
        while magnitude >= 10_000 {
            magnitude /= 10_000
            count += 4
        }
        while magnitude >= 10 {
            magnitude /= 10
            count += 1
        }
        return count
    }
}
