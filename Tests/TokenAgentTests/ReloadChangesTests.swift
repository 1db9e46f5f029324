import Testing
import TokenAgent
import TokenWire

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

    /// An access-token entry is a kind of its own, `access:NAME`, and a reload reports it as it
    /// reports any kind: added, removed, its provider (a setting of the entry) or its rules
    /// (`allow`) changed; in words, named as a request names it.
    @Test func anAccessTokenEntryIsReportedAsTheKindItIs() async throws {
        func entry(_ account: String, _ uid: Int, lifetime: Int = 3600) -> String {
            #"{"service_account": "\#(account)@proj.iam.gserviceaccount.com", "lifetime": \#(lifetime),"#
                + #" "allow": {"users": [\#(uid)]}}"#
        }
        let startup = try configuration(
            #"{"access_tokens": {"a": \#(entry("a", 1201)), "b": \#(entry("b", 1300)), "c": \#(entry("c", 1400))}}"#
        )
        // `a` asks another lifetime (its provider), `b` allows another user (its rules), `c` goes
        // and `d` comes.
        let next = try configuration(
            #"{"access_tokens": {"a": \#(entry("a", 1201, lifetime: 1800)), "b": \#(entry("b", 1301)),"#
                + #" "d": \#(entry("d", 1500))}}"#
        )
        let discover: ProviderSet.CredentialsDiscovery = { FixedHostToken() }
        let before = try ProviderSet.build(from: startup, discoverCredentials: discover)
        let after = try ProviderSet.build(from: next, reusing: before, discoverCredentials: discover)
        let oldRules = try AccessRules.resolve(startup.accessRules, kinds: startup.configuredKinds, strict: true).rules
        let newRules = try AccessRules.resolve(next.accessRules, kinds: next.configuredKinds, strict: true).rules
        let kinds = Set(after.providers.keys)
        let changes = ReloadChanges(
            startup: startup,
            from: startup,
            previousKinds: Set(before.providers.keys),
            to: next,
            kinds: kinds,
            providerChanged: after.changedKinds(since: before),
            rulesChanged: oldRules.kindsWithChangedRules(to: newRules, kinds: kinds)
        )
        #expect(changes.field == "+access:d,-access:c,provider:access:a,rules:access:b")
        #expect(
            ReloadChanges.describe(field: changes.field)
                == "kinds added: access d; kinds removed: access c; "
                + "provider or issuer changed (tokens dropped): access a; rules changed: access b"
        )
        let kept = after.providers["access:b"].map { $0 as AnyObject }
        #expect(kept === before.providers["access:b"].map { $0 as AnyObject }, "b keeps its provider")
        for built in [before, after] {
            for provider in built.providers.values { await provider.shutdown() }
        }
    }
}

/// The host's credentials as a reload finds them: the same source each time, never asked here.
private struct FixedHostToken: AccessTokenSource {
    var summary: String { "fixed host token" }
    var quotaProject: String? { nil }
    func accessToken() async throws(CredentialsError) -> AccessToken {
        AccessToken(value: "ya29.host", expiresAt: UnixTime(seconds: 4_000_000_000))
    }
    func invalidate(_ rejected: AccessToken) {}
    func shutdown() async {}
}
