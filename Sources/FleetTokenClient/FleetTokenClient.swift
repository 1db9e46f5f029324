import Foundation
import Synchronization
import TokenWire

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
        /// remembered token of a short lifetime needs only a quarter of that lifetime, at least 10 s.
        public var defaultMinimumValidity: TimeInterval = 300
        /// The longest any call waits for its reply, seconds. Default 15.
        public var callTimeout: TimeInterval = 15
        /// How long a call keeps retrying on a new connection while the agent is unreachable
        /// (restarting, or being started by socket activation), seconds. Default 2.
        public var reconnectDeadline: TimeInterval = 2
        /// Connections kept to the agent; requests are spread over them. Default 1.
        public var connections = 1
        /// The most tokens remembered in-process. Default 10000.
        public var memoCapacity = 10_000

        /// The default configuration.
        public init() {}
    }

    /// The socket path used when none is given: `$FLEET_TOKEND_SOCKET`, else
    /// `/run/fleet-tokend/tokens.sock`.
    public static var defaultSocketPath: String {
        let environment = ProcessInfo.processInfo.environment["FLEET_TOKEND_SOCKET"] ?? ""
        return environment.isEmpty ? "/run/fleet-tokend/tokens.sock" : environment
    }

    private struct Memo {
        var token: Token
        var validUntil: ContinuousClock.Instant
        var lifetimeSeconds: Double
    }

    private struct FlightKey: Hashable {
        var subject: TokenSubject
        var minimumValidity: Int?
    }

    private struct State {
        var connections: [AgentConnection?]
        var nextConnection = 0
        var memo: [TokenSubject: Memo] = [:]
        var flights: [FlightKey: Task<Token, any Error>] = [:]
    }

    /// The agent's socket path.
    public let socketPath: String
    /// The configuration.
    public let configuration: Configuration
    private let state: Mutex<State>
    private let counters = Mutex((memoHits: 0, requests: 0))

    /// Creates a client for the agent listening at `socketPath`. No connection is made until the
    /// first call.
    public init(socketPath: String = FleetTokenClient.defaultSocketPath, configuration: Configuration = Configuration())
    {
        self.socketPath = socketPath
        self.configuration = configuration
        self.state = Mutex(State(connections: Array(repeating: nil, count: max(1, configuration.connections))))
    }

    deinit {
        state.withLock { state in
            for connection in state.connections { connection?.shutdown() }
        }
    }

    // MARK: Calls

    /// A token for `subject` with at least `minimumValidity` seconds left (the configuration's
    /// default when `nil`).
    ///
    /// Returns a remembered token without a round trip when it has enough validity left;
    /// otherwise asks the agent, sharing one request among concurrent callers for the same
    /// token. Throws ``FleetTokenError``.
    public func token(_ subject: TokenSubject, minimumValidity: TimeInterval? = nil) async throws(FleetTokenError)
        -> Token
    {
        if configuration.memoization, let token = remembered(subject, minimumValidity: minimumValidity) {
            counters.withLock { $0.memoHits += 1 }
            return token
        }
        let seconds = minimumValidity.map { Int($0.rounded(.up)) }
        let key = FlightKey(subject: subject, minimumValidity: seconds)
        let flight = state.withLock { state -> Task<Token, any Error> in
            if let flight = state.flights[key] { return flight }
            let flight = Task { [self] in
                defer { self.state.withLock { _ = $0.flights.removeValue(forKey: key) } }
                let reply = try await exchange(.get(kind: subject.kind, id: subject.id, minValiditySeconds: seconds))
                return try remember(subject, reply)
            }
            state.flights[key] = flight
            return flight
        }
        return try await Self.typed { try await flight.value }
    }

    /// A freshly fetched token for `subject` (`REFRESH`): use it when a token was refused.
    public func refresh(_ subject: TokenSubject) async throws(FleetTokenError) -> Token {
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
    public func refresh(_ subject: TokenSubject, replacing refused: Token) async throws(FleetTokenError) -> Token {
        forget(subject, ifHolding: refused.jwt)
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
            forget(subject, ifHolding: refused.jwt)
            throw .unavailable("the agent handed back the refused token")
        }
        return token
    }

    /// Forgets the remembered token for `subject` if it is `jwt`.
    private func forget(_ subject: TokenSubject, ifHolding jwt: String) {
        state.withLock { state in
            if state.memo[subject]?.token.jwt == jwt { state.memo[subject] = nil }
        }
    }

    /// Makes the agent (and this client) forget the token for `subject` (`DROP`).
    public func drop(_ subject: TokenSubject) async throws(FleetTokenError) {
        _ = state.withLock { $0.memo.removeValue(forKey: subject) }
        let reply = try await exchange(.drop(kind: subject.kind, id: subject.id))
        guard case .ok = reply else { throw Self.unexpected(reply) }
    }

    /// Checks that the agent answers (`PING`).
    public func ping() async throws(FleetTokenError) {
        let reply = try await exchange(.ping)
        guard case .pong = reply else { throw Self.unexpected(reply) }
    }

    /// The agent's counters (`STATS`), by name.
    public func stats() async throws(FleetTokenError) -> [String: Int] {
        let reply = try await exchange(.stats)
        guard case .ok(let text) = reply else { throw Self.unexpected(reply) }
        return WireReply.statsFields(text).compactMapValues { Int($0) }
    }

    /// Tokens this client answered from its memo, and requests it sent to the agent.
    public var localCounters: (memoHits: Int, requests: Int) { counters.withLock { $0 } }

    /// Forgets every remembered token (the agent keeps its own).
    public func forgetRemembered() {
        state.withLock { $0.memo.removeAll() }
    }

    // MARK: Memo

    private func remembered(_ subject: TokenSubject, minimumValidity: TimeInterval?) -> Token? {
        state.withLock { state -> Token? in
            guard let memo = state.memo[subject] else { return nil }
            let needed =
                minimumValidity
                ?? max(10, min(configuration.defaultMinimumValidity, memo.lifetimeSeconds / 4))
            let left = ContinuousClock.now.duration(to: memo.validUntil)
            guard left > .milliseconds(Int64(needed * 1000)) else { return nil }
            return memo.token
        }
    }

    private func remember(_ subject: TokenSubject, _ reply: WireReply) throws(FleetTokenError) -> Token {
        guard case .token(let jwt, let expiresAt) = reply else { throw Self.unexpected(reply) }
        let token = Token(jwt: jwt, expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt)))
        guard configuration.memoization else { return token }
        let left = token.expiresAt.timeIntervalSinceNow
        let memo = Memo(
            token: token,
            validUntil: ContinuousClock.now.advanced(by: .milliseconds(Int64(left * 1000))),
            lifetimeSeconds: left
        )
        state.withLock { state in
            if state.memo.count >= configuration.memoCapacity, state.memo[subject] == nil {
                let now = ContinuousClock.now
                state.memo = state.memo.filter { $0.value.validUntil > now }
                if state.memo.count >= configuration.memoCapacity, let victim = state.memo.keys.first {
                    state.memo.removeValue(forKey: victim)
                }
            }
            state.memo[subject] = memo
        }
        return token
    }

    // MARK: Exchanges

    /// Sends `request` and returns its reply; retries on a new connection while the agent is
    /// unreachable, up to the reconnect deadline. `ERR` replies are thrown.
    private func exchange(_ request: WireRequest) async throws(FleetTokenError) -> WireReply {
        if case .failure(let error) = RequestParser.parse(text: request.line) {
            throw FleetTokenError(error)
        }
        counters.withLock { $0.requests += 1 }
        let line = request.line + "\n"
        let clock = ContinuousClock()
        let callDeadline = clock.now.advanced(by: .milliseconds(Int64(configuration.callTimeout * 1000)))
        var unreachableSince: ContinuousClock.Instant?
        var pause = Duration.milliseconds(10)
        while true {
            let problem: String
            var connection: AgentConnection?
            do {
                connection = try self.connection()
                let left = clock.now.duration(to: callDeadline)
                let reply = try await connection!.request(line, timeout: Self.seconds(left))
                if case .error(let error) = reply { throw FleetTokenError(error) }
                return reply
            } catch let error as FleetTokenError {
                throw error
            } catch is ReplyTimedOut {
                // Replies come in order: later calls must not queue behind the late one.
                connection?.retire()
                discardBrokenConnections()
                throw .timedOut("no reply within \(configuration.callTimeout) s")
            } catch {
                problem = "\(error)"
                discardBrokenConnections()
            }
            let now = clock.now
            let since = unreachableSince ?? now
            unreachableSince = since
            let giveUp = min(
                callDeadline,
                since.advanced(by: .milliseconds(Int64(configuration.reconnectDeadline * 1000)))
            )
            if now.advanced(by: pause) > giveUp {
                throw .agentUnreachable("\(problem) (socket \(socketPath))")
            }
            try? await Task.sleep(for: pause)
            pause = min(pause * 2, .milliseconds(200))
        }
    }

    private func connection() throws -> AgentConnection {
        try state.withLock { state in
            let index = state.nextConnection % state.connections.count
            state.nextConnection &+= 1
            if let connection = state.connections[index], connection.isOpen { return connection }
            let connection = try AgentConnection(path: socketPath)
            state.connections[index] = connection
            return connection
        }
    }

    private func discardBrokenConnections() {
        state.withLock { state in
            for index in state.connections.indices where state.connections[index]?.isOpen == false {
                state.connections[index] = nil
            }
        }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    private static func unexpected(_ reply: WireReply) -> FleetTokenError {
        .badRequest("unexpected reply from the agent: \(reply.line.dropLast())")
    }

    private static func typed<T>(_ body: () async throws -> T) async throws(FleetTokenError) -> T {
        do {
            return try await body()
        } catch let error as FleetTokenError {
            throw error
        } catch {
            throw .unavailable("\(error)")
        }
    }
}
