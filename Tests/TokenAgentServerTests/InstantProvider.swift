import TokenAgent

@testable import TokenAgentServer

/// Mints `tok-<id>` tokens for an hour, except for ids starting `hang-`, whose fetch never ends
/// (until the test's task is cancelled): the provider of the request handler's and the socket
/// loop's tests.
struct InstantProvider: TokenProvider {
    var summary: String { "instant" }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        if key.id.hasPrefix("hang-") { try await Task.sleep(for: .seconds(3600)) }
        return FetchedToken(token: "tok-\(key.id)", expiresAtUnixSeconds: SystemAgentClock().wallSeconds + 3600)
    }
}

/// The engine the request handler's tests serve from: `vehicle` and `trip` from
/// ``InstantProvider``, with `v-1` and `t-1` cached for `tokenLifetime` seconds (on `clock`),
/// and the status its connections count in.
func handlerTestEngine(
    rules: AccessRules = .open(agentUID: 4_000_000),
    health: AgentHealth = AgentHealth(),
    storage: (any TokenStorage)? = nil,
    clock: any AgentClock = SystemAgentClock(),
    tokenLifetime: Double = 3600
) -> (engine: TokenEngine, status: AgentStatus) {
    let engine = TokenEngine(
        providers: ["vehicle": InstantProvider(), "trip": InstantProvider()],
        clock: clock,
        storage: storage
    )
    let expiresAt = Int64(clock.wallSeconds + tokenLifetime)
    engine.importTokens(
        [
            CachedToken(kind: "vehicle", id: "v-1", token: "tok-v-1", expiresAt: expiresAt),
            CachedToken(kind: "trip", id: "t-1", token: "tok-t-1", expiresAt: expiresAt),
        ],
        from: .memory
    )
    let status = AgentStatus(
        engine: engine,
        server: ServerStatistics(),
        access: AccessControl(rules: rules),
        health: health
    )
    return (engine, status)
}
