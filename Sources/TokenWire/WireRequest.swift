/// A request of protocol v1, parsed from one line.
public enum WireRequest: Sendable, Hashable {
    /// `GET <kind> <id> [<min-validity-s>]`.
    case get(kind: String, id: String, minValiditySeconds: Int?)
    /// `REFRESH <kind> <id> [<refused-token>]`: with the token the caller was refused, the agent
    /// fetches only while that token is still the cached one.
    case refresh(kind: String, id: String, refusedToken: String? = nil)
    /// `DROP <kind> <id>`.
    case drop(kind: String, id: String)
    /// `INFO <kind> <id>`: one line about a cached key, never its token.
    case info(kind: String, id: String)
    /// `PING`.
    case ping
    /// `STATS`.
    case stats
    /// `METRICS`: the Prometheus text exposition, ended by the line ``MetricsText/endLine``.
    case metrics
    /// `HELP`.
    case help
    /// `QUIT`.
    case quit
    /// `SHM <kind> [<layout> ...]`: asks for the kind's shared-memory segment; the reply carries
    /// its descriptor (docs/SHM.md). `layouts` are the segment layouts the reader can map (this
    /// release's readers name 2); the agent answers with the layout it writes whatever they name.
    case shm(kind: String, layouts: [Int] = [])
    /// `TOUCH <kind> <id> [<id> ...]`: reports keys read through shared memory, so the agent keeps
    /// refreshing them. Never fetches; always answered `OK`.
    case touch(kind: String, ids: [String])
    /// `WARM <kind> <id> [<id> ...]`: asks for tokens ahead of need. Fetches, at the lowest
    /// priority, the ids not cached and not already being fetched, and answers at once
    /// (`OK queued=<n> cached=<m>`) without waiting for any fetch. At most
    /// ``WireLimits/maxWarmIDs`` ids.
    case warm(kind: String, ids: [String])

    /// A verb of protocol v1, as written on the wire (upper case). ``RequestParser`` knows exactly
    /// these: it looks a line's first field up here, so a verb missing from this list is an
    /// unknown verb. Declared in the order `HELP` lists them.
    public enum Verb: String, Sendable, CaseIterable, Hashable {
        case get = "GET"
        case refresh = "REFRESH"
        case drop = "DROP"
        case info = "INFO"
        case ping = "PING"
        case stats = "STATS"
        case metrics = "METRICS"
        case help = "HELP"
        case quit = "QUIT"
        case shm = "SHM"
        case touch = "TOUCH"
        case warm = "WARM"
    }

    /// The verbs of protocol v1, in the order `HELP` lists them.
    public static let verbs = Verb.allCases.map(\.rawValue)

    /// This request's verb.
    public var verb: Verb {
        switch self {
        case .get: return .get
        case .refresh: return .refresh
        case .drop: return .drop
        case .info: return .info
        case .ping: return .ping
        case .stats: return .stats
        case .metrics: return .metrics
        case .help: return .help
        case .quit: return .quit
        case .shm: return .shm
        case .touch: return .touch
        case .warm: return .warm
        }
    }

    /// The request as one line, without the trailing LF (what a client writes). An access-token
    /// entry's kind (``AccessTokenKind``) is written as `access`, its id being its name.
    public var line: String {
        func wire(_ kind: String) -> String {
            AccessTokenKind.isAccessKind(kind) ? AccessTokenKind.wireKind : kind
        }
        switch self {
        case .get(let kind, let id, let minValidity):
            if let minValidity { return "GET \(wire(kind)) \(id) \(minValidity)" }
            return "GET \(wire(kind)) \(id)"
        case .refresh(let kind, let id, let refused):
            if let refused { return "REFRESH \(wire(kind)) \(id) \(refused)" }
            return "REFRESH \(wire(kind)) \(id)"
        case .drop(let kind, let id): return "DROP \(wire(kind)) \(id)"
        case .info(let kind, let id): return "INFO \(wire(kind)) \(id)"
        case .ping: return "PING"
        case .stats: return "STATS"
        case .metrics: return "METRICS"
        case .help: return "HELP"
        case .quit: return "QUIT"
        case .shm(let kind, let layouts):
            let named = AccessTokenKind.name(ofKind: kind).map { [AccessTokenKind.wireKind, String($0)] } ?? [kind]
            return (["SHM"] + named + layouts.map(String.init)).joined(separator: " ")
        case .touch(let kind, let ids): return "TOUCH \(wire(kind)) " + ids.joined(separator: " ")
        case .warm(let kind, let ids): return "WARM \(wire(kind)) " + ids.joined(separator: " ")
        }
    }
}
