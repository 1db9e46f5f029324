import Testing
import TokenAgent

@Suite("What a reload changed")
struct ReloadChangesTests {
    private func configuration(_ json: String) throws -> AgentConfiguration { try parseConfiguration(json) }

    @Test func eachChangeIsAnItemAndSaidInWords() throws {
        let startup = try configuration(#"{"demo": true}"#)
        var next = startup
        next.refreshMargin = 900
        next.logLevel = "debug"
        next.maxConnections = 10
        let changes = ReloadChanges(
            startup: startup,
            from: startup,
            previousKinds: ["vehicle", "trip"],
            to: next,
            kinds: ["vehicle", "task"],
            providerChanged: ["vehicle", "trip"],
            rulesChanged: ["vehicle", "task"]
        )
        #expect(changes.field == "+task,-trip,provider:vehicle,rules:vehicle,policy,log_level,restart:max_connections")
        #expect(
            ReloadChanges.describe(field: changes.field)
                == "kinds added: task; kinds removed: trip; provider or issuer changed (tokens dropped): vehicle; "
                + "rules changed: vehicle; refresh policy changed; log level changed; "
                + "take effect at the next restart: max_connections"
        )
    }

    @Test func aStartUpKeyIsSaidUntilTheRestartAndOtherIsWhatElseDiffers() throws {
        let startup = try configuration(#"{"demo": true}"#)
        var changed = startup
        changed.requestTimeout = 4
        let kinds: Set<String> = ["vehicle"]
        func changes(_ previous: AgentConfiguration, _ next: AgentConfiguration) -> String {
            ReloadChanges(
                startup: startup,
                from: previous,
                previousKinds: kinds,
                to: next,
                kinds: kinds,
                providerChanged: [],
                rulesChanged: []
            ).field
        }
        #expect(changes(startup, startup) == "none")
        #expect(changes(startup, changed) == "restart:request_timeout")
        #expect(changes(changed, changed) == "restart:request_timeout", "still not in force")
        #expect(changes(changed, startup) == "none", "back to what the agent started with")
        var watched = changed
        watched.watchConfig = true
        #expect(changes(changed, watched) == "restart:request_timeout,other")
        #expect(ReloadChanges.describe(field: "none") == "nothing changed")
        #expect(ReloadChanges.describe(field: "other") == "other settings changed")
        #expect(ReloadChanges.describe(field: "-") == nil, "before any reload: nothing to say")
        #expect(ReloadChanges.describe(field: "future:thing") == nil, "an item of another version")
    }
}
