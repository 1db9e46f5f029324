import TokenAgent

/// What a connection works with, the same for every connection a server serves: the engine it
/// asks, the access rules it checks, the counters it feeds, and the status its `STATS` and
/// `METRICS` replies report.
struct ConnectionContext: Sendable {
    /// The engine that answers the connection's requests.
    let engine: TokenEngine
    /// The access rules in force, checked for every request.
    let access: AccessControl
    /// The shared-memory segments (`SHM`); `nil` when the operator turned them off.
    let segments: SharedSegments?
    /// The health judge: `PING` answers whether the refresher is stalled.
    let health: AgentHealth
    /// Requests counted by verb and result (`fleet_tokend_requests_total`).
    let requests: RequestCounters
    /// The server's counters: `TOUCH` lines are counted there.
    let server: ServerStatistics
    /// What `STATS` and `METRICS` report.
    let status: AgentStatus
    /// The pace of each uid's costly replies (`STATS`, `METRICS`, `INFO`).
    let costlyReplies: CostlyReplyPacer
    /// The configured kinds' names, one table for all the context's connections.
    let kindNames = KindNames.Shared()

    /// The context of connections answered by `engine`, whose requests count in `status`; each
    /// uid's costly replies are paced by `costlyReplies`.
    init(engine: TokenEngine, status: AgentStatus, costlyReplies: CostlyReplyPacer = CostlyReplyPacer()) {
        self.engine = engine
        self.access = status.access
        self.segments = status.segments
        self.health = status.health
        self.requests = status.metrics.requests
        self.server = status.server
        self.status = status
        self.costlyReplies = costlyReplies
    }
}
