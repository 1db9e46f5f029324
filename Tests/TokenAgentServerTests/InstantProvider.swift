import TokenAgent

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
