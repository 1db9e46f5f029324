import Synchronization
import TokenSegment
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The client workers link to get Fleet Engine tokens from the host's `fleet-tokend` agent.
///
/// One client is meant to be shared by a whole process: it keeps one persistent connection (or a
/// small pool) to the agent, pipelines every request on it, shares one request among concurrent
/// callers asking for the same token, remembers tokens in-process while they have more than the
/// minimum validity left, and reconnects transparently when the agent restarts.
///
/// ```swift
/// let client = FleetTokenClient()
/// let token = try await client.token(.vehicle("v-1"))
/// request.setValue("Bearer \(token.jwt)", forHTTPHeaderField: "Authorization")
/// ```
public final class FleetTokenClient: Sendable {
    /// How a client behaves.
    public struct Configuration: Sendable, Hashable {
        /// Whether tokens are remembered in-process and returned without a round trip while they
        /// have more than the minimum validity left. Default on.
        public var memoization = true
        /// The minimum validity asked for when a call names none, seconds. Default 300 (the
        /// agent's default and the Fleet Engine SDKs' 5-minute guarantee). As in the agent, a
        /// remembered token of a short lifetime needs only a quarter of that lifetime, at least
        /// 10 s: the lifetime is read from a JWT's `iat`; a token without one needs all of it.
        /// Set it to the agent's `min_validity` when that is higher, or the memo may serve a
        /// token the agent would replace.
        public var defaultMinimumValidity: TimeInterval = 300
        /// The longest a call waits with no reply arriving on its connection, seconds: a call
        /// queued behind others' (the agent answers in order) waits its turn while their replies
        /// keep coming, and times out once the agent answers nothing for this long. Default 15.
        public var callTimeout: TimeInterval = 15
        /// How long a call keeps retrying on a new connection while the agent is unreachable
        /// (restarting, or being started by socket activation), seconds. Default 2.
        public var reconnectDeadline: TimeInterval = 2
        /// Connections kept to the agent; requests are spread over them. Default 1.
        public var connections = 1
        /// The most tokens remembered in-process. Default 10000.
        public var memoCapacity = 10_000
        /// Whether tokens are read from the agent's shared-memory segments when it offers them
        /// (docs/SHM.md): no system call and always the agent's current token. Default on; the
        /// memo then serves only kinds without a segment.
        public var sharedMemory = true

        /// The default configuration.
        public init() {}
    }

    /// The socket path used when none is given: `$FLEET_TOKEND_SOCKET` when set and not empty,
    /// else `/run/fleet-tokend/tokens.sock` (`AgentDefaults` in TokenWire, shared with the agent).
    public static var defaultSocketPath: String {
        AgentDefaults.socketPath(environment: ProcessInfo.processInfo.environment)
    }

    /// The agent's socket path.
    public let socketPath: String
    /// The configuration.
    public let configuration: Configuration
    let memo: MemoTable
    let flights = Flights()
    let pool: ConnectionPool
    let memoHits = Atomic(0)
    let requests = Atomic(0)
    let segments = SegmentReads()

    /// Creates a client for the agent listening at `socketPath`. No connection is made until the
    /// first call.
    public init(socketPath: String = FleetTokenClient.defaultSocketPath, configuration: Configuration = Configuration())
    {
        self.socketPath = socketPath
        self.configuration = configuration
        self.memo = MemoTable(
            capacity: configuration.memoCapacity,
            defaultMinimumValidity: configuration.defaultMinimumValidity
        )
        self.pool = ConnectionPool(path: socketPath, count: configuration.connections)
    }

    deinit {
        pool.shutdown()
    }

    /// Asks for `kind`'s segment and maps it, for the calls that follow.
    /// Returns the error when the agent cannot be reached at all: a GET would wait for it again.
    private nonisolated(nonsending) func askForSegment(_ kind: String) async -> FleetTokenError? {
        do {
            let (reply, descriptor) = try await askForSegmentNamingLayouts(kind)
            segments.received(kind: kind, reply: reply, descriptor: descriptor)
            if descriptor != nil, segments.claimReporter() { startReportingTouches() }
            return nil
        } catch {
            segments.received(kind: kind, reply: nil, descriptor: nil)
            if case .agentUnreachable = error { return error }
            return nil
        }
    }

    /// `SHM <kind> 2`: names the one layout this client maps (``SegmentLayout/version``).
    private nonisolated(nonsending) func askForSegmentNamingLayouts(
        _ kind: String
    ) async throws(FleetTokenError) -> (WireReply, Int32?) {
        try await exchangeReceiving(.shm(kind: kind, layouts: [Int(SegmentLayout.version)]))
    }

    /// Reports the keys read through memory (`TOUCH`) every few seconds, off the read path, for
    /// as long as the client lives.
    private func startReportingTouches() {
        Task.detached { [weak self] in
            while true {
                guard let interval = self?.segments.reportInterval else { return }
                try? await Task.sleep(for: .milliseconds(Int64(saturating: interval * 1000)))
                guard let self else { return }
                for request in self.segments.takeTouches() { _ = try? await self.exchange(request) }
            }
        }
    }

    // MARK: Calls

    /// A token for `subject` with at least `minimumValidity` seconds left (the configuration's
    /// default when `nil`).
    ///
    /// Returns a remembered token without a round trip (and without leaving the caller's
    /// executor) when it has enough validity left; otherwise asks the agent, sharing one request
    /// among concurrent callers for the same token. Throws ``FleetTokenError``.
    @inlinable
    public nonisolated(nonsending) func token(
        _ subject: TokenSubject,
        minimumValidity: TimeInterval? = nil
    ) async throws(FleetTokenError) -> Token {
        // Inlined into the caller, so that a read from memory makes no async call of its own
        // (no task frame to allocate): one plain call, and the rest only when it misses.
        if let token = tokenFromMemory(subject, minimumValidity: minimumValidity) { return token }
        return try await tokenAfterMemory(subject, minimumValidity: minimumValidity)
    }

    /// The token for `subject` when the kind's segment is mapped and the copy this client made of
    /// the key's slot is current and servable; `nil` otherwise (nothing else is looked at or
    /// changed).
    @usableFromInline
    func tokenFromMemory(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Token? {
        // Only subjects that passed `TokenIdentifier.keyProblem` are ever cached (the one way in is
        // `segments.lookup`, which tokenAfterMemory asks after that check), so a hit needs no
        // check of its own: `*`, `.` and `..` (a segment written by an older agent might hold
        // them) miss here and are refused there, before anything is read.
        guard configuration.sharedMemory else { return nil }
        return segments.cachedToken(subject, minimumValidity: minimumValidity)
    }

    /// ``token(_:minimumValidity:)`` past the copies kept of slots: the segment itself, the memo,
    /// then the agent.
    @usableFromInline
    nonisolated(nonsending) func tokenAfterMemory(
        _ subject: TokenSubject,
        minimumValidity: TimeInterval?
    ) async throws(FleetTokenError) -> Token {
        if let problem = TokenIdentifier.keyProblem(kind: subject.kind, id: subject.id.utf8) {
            throw FleetTokenError(WireError(.badID, problem))
        }
        var memoMayAnswer = true
        var unreachable: FleetTokenError?
        if configuration.sharedMemory {
            var answer = segments.lookup(subject, minimumValidity: minimumValidity)
            if case .askForSegment = answer {
                unreachable = await askForSegment(subject.kind)
                answer = segments.lookup(subject, minimumValidity: minimumValidity)
            }
            switch answer {
            case .token(let token): return token
            case .miss: memoMayAnswer = false
            case .socket, .askForSegment: break
            }
        }
        if memoMayAnswer, let token = remembered(subject, minimumValidity: minimumValidity) { return token }
        // The agent could not be reached for the segment just now: do not wait for it a second time.
        if let unreachable { throw unreachable }
        // Out of range (NaN, negative, over a day) is the agent's `bad-request`, said here.
        if let minimumValidity, !(0...Double(WireLimits.maxMinValiditySeconds)).contains(minimumValidity) {
            throw FleetTokenError(
                WireError(
                    .badRequest,
                    "min-validity must be whole seconds from 0 to \(WireLimits.maxMinValiditySeconds)"
                )
            )
        }
        let key = Flights.Key(subject: subject, minimumValidity: minimumValidity.map { Int($0.rounded(.up)) })
        while !flights.lead(key) {
            if let result = await flights.join(key) { return try result.get() }
        }
        let result: Result<Token, FleetTokenError>
        do {
            let request = WireRequest.get(kind: subject.kind, id: subject.id, minValiditySeconds: key.minimumValidity)
            result = .success(try remember(subject, try await exchange(request)))
        } catch {
            result = .failure(error)
        }
        flights.land(key, with: result)
        return try result.get()
    }

    /// The OAuth 2.0 access token of the agent's `access_tokens` entry `name`
    /// (``TokenSubject/accessToken(_:)``), with at least `minimumValidity` seconds left (the
    /// configuration's default when `nil`; never less than the agent's 300 s floor). Send its
    /// ``Token/jwt`` as `Authorization: Bearer …`; on a 401, ``refresh(_:replacing:)`` with
    /// `.accessToken(name)`. Throws ``FleetTokenError``.
    public nonisolated(nonsending) func accessToken(
        _ name: String,
        minimumValidity: TimeInterval? = nil
    ) async throws(FleetTokenError) -> Token {
        try await token(.accessToken(name), minimumValidity: minimumValidity)
    }

    /// A freshly fetched token for `subject` (`REFRESH`): use it when a token was refused.
    public nonisolated(nonsending) func refresh(_ subject: TokenSubject) async throws(FleetTokenError) -> Token {
        let reply = try await exchange(.refresh(kind: subject.kind, id: subject.id))
        return try remember(subject, reply)
    }

    /// A token to use instead of `refused`, the token a service just refused (HTTP 401)
    /// (`REFRESH <kind> <id> <refused>`).
    ///
    /// The agent fetches only while `refused` is still its cached token, so a hundred workers
    /// that were all refused the same token cause one fetch; a worker whose token was already
    /// replaced gets the newer one at once. The refused token is never handed back. An older
    /// agent that does not know the form answers `bad-request`; then a plain ``refresh(_:)`` is
    /// sent, as it is for a token too long to fit a request line.
    public nonisolated(nonsending) func refresh(
        _ subject: TokenSubject,
        replacing refused: Token
    ) async throws(FleetTokenError) -> Token {
        memo.forget(subject, ifHolding: refused.jwt)
        let request = WireRequest.refresh(kind: subject.kind, id: subject.id, refusedToken: refused.jwt)
        // A token too long to fit a request line cannot be named: fall back to the plain form.
        guard request.line.utf8.count <= WireLimits.maxRequestLineBytes else { return try await refresh(subject) }
        let reply: WireReply
        do {
            reply = try await exchange(request)
        } catch .badRequest(let text) where text.hasPrefix(WireErrorCode.badRequest.rawValue) {
            return try await refresh(subject)
        }
        let token = try remember(subject, reply)
        guard token.jwt != refused.jwt else {
            memo.forget(subject, ifHolding: refused.jwt)
            throw .unavailable("the agent handed back the refused token")
        }
        return token
    }

    /// Makes the agent (and this client) forget the token for `subject` (`DROP`).
    public nonisolated(nonsending) func drop(_ subject: TokenSubject) async throws(FleetTokenError) {
        memo.forget(subject)
        let reply = try await exchange(.drop(kind: subject.kind, id: subject.id))
        guard case .ok = reply else { throw Self.unexpected(reply) }
    }

    /// Checks that the agent answers (`PING`).
    public nonisolated(nonsending) func ping() async throws(FleetTokenError) {
        let reply = try await exchange(.ping)
        guard case .pong = reply else { throw Self.unexpected(reply) }
    }

    /// The agent's counters (`STATS`), by name.
    public nonisolated(nonsending) func stats() async throws(FleetTokenError) -> [String: Int] {
        let reply = try await exchange(.stats)
        guard case .ok(let text) = reply else { throw Self.unexpected(reply) }
        return WireReply.statsFields(text).compactMapValues { Int($0) }
    }

    /// The agent's metrics (`METRICS`): the Prometheus text exposition, without the closing
    /// `# EOF` line. Needs the admin rule, like ``stats()``.
    public nonisolated(nonsending) func metrics() async throws(FleetTokenError) -> String {
        let reply = try await exchange(.metrics)
        guard case .ok(let text) = reply else { throw Self.unexpected(reply) }
        return text
    }

    /// Tokens this client answered from its memo, and requests it sent to the agent.
    public var localCounters: (memoHits: Int, requests: Int) {
        (memoHits.load(ordering: .relaxed), requests.load(ordering: .relaxed))
    }

    /// Tokens this client answered from the agent's shared memory.
    public var sharedMemoryReads: Int { segments.hits }

    /// Forgets every remembered token (the agent keeps its own).
    public func forgetRemembered() {
        memo.removeAll()
    }

    // MARK: Memo

    /// The remembered token for `subject` when memoization is on and it has enough validity
    /// left; counts the hit. Synchronous: the fast path of every style of call.
    func remembered(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Token? {
        guard configuration.memoization, let token = memo.token(for: subject, minimumValidity: minimumValidity) else {
            return nil
        }
        memoHits.add(1, ordering: .relaxed)
        return token
    }

    private func remember(_ subject: TokenSubject, _ reply: WireReply) throws(FleetTokenError) -> Token {
        guard case .token(let jwt, let expiresAt) = reply else { throw Self.unexpected(reply) }
        // Whatever answers on the socket may not be the agent: only what the agent could serve is a token.
        let now = Int64(Date().timeIntervalSince1970)
        if let problem = WireToken.problem(token: jwt, expiresAt: expiresAt, now: now) { throw .invalidReply(problem) }
        let token = Token(jwt: jwt, expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt)))
        // A kind read through shared memory needs no memo: the segment is always current.
        if configuration.memoization, !segments.isMapped(subject.kind) { memo.remember(token, for: subject) }
        return token
    }

    static func unexpected(_ reply: WireReply) -> FleetTokenError {
        .badRequest("unexpected reply from the agent: \(reply.line.dropLast())")
    }
}

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

/// What a ``FleetTokenClient/warm(_:)`` did at the agent.
public struct WarmResult: Sendable, Hashable {
    /// Subjects whose token is now being fetched (by this call or already before it).
    public var queued: Int
    /// Subjects whose token was already cached.
    public var cached: Int

    /// A result.
    public init(queued: Int = 0, cached: Int = 0) {
        self.queued = queued
        self.cached = cached
    }
}

extension FleetTokenClient {
    /// Asks the agent to fetch the tokens of `subjects` ahead of need (`WARM`), so that the
    /// calls for them later are answered from its cache; returns at once, without waiting for
    /// any fetch.
    ///
    /// The subjects are sent grouped by kind, at most ``WireLimits/maxWarmIDs`` a line (and
    /// within the line limit). Every kind and id is checked first: one that breaks the rules
    /// throws before anything is sent. A subject counted neither queued nor cached was held off
    /// (the agent's back-off or a remembered refusal) or over one of its bounds. The agent fetches
    /// them at the lowest priority: they never delay a token someone waits for.
    public nonisolated(nonsending) func warm(_ subjects: [TokenSubject]) async throws(FleetTokenError) -> WarmResult {
        let requests = Self.warmRequests(subjects)
        for request in requests { try Self.validate(request) }
        var result = WarmResult()
        for request in requests {
            let reply = try await exchange(request)
            guard case .ok(let text) = reply else { throw Self.unexpected(reply) }
            let fields = WireReply.statsFields(text)
            guard let queued = fields["queued"].flatMap({ Int($0) }), let cached = fields["cached"].flatMap({ Int($0) })
            else { throw Self.unexpected(reply) }
            result.queued += queued
            result.cached += cached
        }
        return result
    }

    /// The `WARM` lines for `subjects`: by kind in order of first appearance, each id once, at most
    /// ``WireLimits/maxWarmIDs`` ids and ``WireLimits/maxRequestLineBytes`` bytes a line.
    static func warmRequests(_ subjects: [TokenSubject]) -> [WireRequest] {
        var kinds: [String] = []
        var ids: [String: [String]] = [:]
        var seen: Set<TokenSubject> = []
        for subject in subjects where seen.insert(subject).inserted {
            if ids[subject.kind] == nil { kinds.append(subject.kind) }
            ids[subject.kind, default: []].append(subject.id)
        }
        return kinds.flatMap { kind in
            idLines(verb: "WARM", kind: kind, ids: ids[kind] ?? [], maxIDs: WireLimits.maxWarmIDs).map {
                WireRequest.warm(kind: kind, ids: $0)
            }
        }
    }
}

/// `ids` split, in order, into the id lists of `<verb> <kind> <id> <id> ...` lines of at most
/// `maxIDs` ids and ``WireLimits/maxRequestLineBytes`` bytes each (an id that alone makes a line
/// too long gets a line of its own, for the agent to refuse).
func idLines(verb: String, kind: String, ids: some Sequence<String>, maxIDs: Int = .max) -> [[String]] {
    let prefix = verb.utf8.count + 1 + kind.utf8.count
    var lines: [[String]] = []
    var line: [String] = []
    var bytes = prefix
    for id in ids {
        if !line.isEmpty, line.count == maxIDs || bytes + 1 + id.utf8.count > WireLimits.maxRequestLineBytes {
            lines.append(line)
            line = []
            bytes = prefix
        }
        line.append(id)
        bytes += 1 + id.utf8.count
    }
    if !line.isEmpty { lines.append(line) }
    return lines
}
