import Foundation

/// Starts a fake provider and an agent whose vehicle and trip kinds point at it, runs `body`,
/// and stops both, whatever happens. `arguments` adds flags that need the provider (e.g. a config
/// file naming its URL).
func withProviderAndAgent(
    _ extraArguments: [String] = [],
    configure: (FakeTokenProvider) -> Void = { _ in },
    arguments: (FakeTokenProvider) throws -> [String] = { _ in [] },
    _ body: (AgentProcess, FakeTokenProvider) async throws -> Void
) async throws {
    let provider = try await FakeTokenProvider.start()
    configure(provider)
    let agent: AgentProcess
    do {
        let providerArguments = try arguments(provider)
        agent = try await AgentProcess(
            [
                "--provider", "vehicle=\(provider.url(kind: "vehicle"))", "--provider",
                "trip=\(provider.url(kind: "trip"))",
            ]
                + extraArguments + providerArguments
        )
    } catch {
        await provider.stop()
        throw error
    }
    do {
        try await body(agent, provider)
    } catch {
        await agent.stop()
        await provider.stop()
        throw error
    }
    await agent.stop()
    await provider.stop()
}

/// The token of an `OK <token> <expires-at>` reply.
func tokenOf(_ reply: String?) -> String? {
    guard let reply else { return nil }
    let fields = reply.split(separator: " ")
    guard fields.count == 3, fields[0] == "OK", Int(fields[2]) != nil else { return nil }
    return String(fields[1])
}
