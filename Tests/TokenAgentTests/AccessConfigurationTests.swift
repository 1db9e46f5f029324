import Foundation
import Testing
import TokenAgent

/// Users and groups from a table, standing in for NSS.
private struct TableResolver: PrincipalResolver {
    var users: [String: UInt32] = ["dispatcher": 1001, "tracker": 1002]
    var groups: [String: UInt32] = ["fleet-vehicles": 2001, "fleet-admins": 2002]

    func uid(ofUser name: String) -> UInt32? { users[name] }
    func gid(ofGroup name: String) -> UInt32? { groups[name] }
}

@Suite("Access rules: configuration and resolution")
struct AccessConfigurationTests {
    @Test func readsAllowAdminAndLimits() throws {
        let configuration = try parseConfiguration(
            """
            {"allow": {"vehicle": {"users": ["dispatcher", 1500, "1600"], "groups": ["fleet-vehicles"]},
                       "trip": {"groups": [3000]}},
             "admin": {"users": ["root"], "groups": ["fleet-admins"]},
             "request_timeout": 2.5, "max_connections_per_uid": 64, "refetch_guard": 1, "rejection_memory": 2}
            """
        )
        #expect(
            configuration.access.allow["vehicle"]
                == PrincipalList(
                    users: [.name("dispatcher"), .number(1500), .number(1600)],
                    groups: [.name("fleet-vehicles")]
                )
        )
        #expect(configuration.access.allow["trip"] == PrincipalList(groups: [.number(3000)]))
        #expect(configuration.access.admin == PrincipalList(users: [.name("root")], groups: [.name("fleet-admins")]))
        #expect(configuration.requestTimeout == 2.5)
        #expect(configuration.maxConnectionsPerUID == 64)
        #expect(configuration.policy.refetchGuard == 1)
        #expect(configuration.policy.rejectionMemory == 2)
        #expect(AgentConfiguration().access == AccessConfiguration(), "no rules by default")
        #expect(AgentConfiguration().requestTimeout == 10)
        #expect(AgentConfiguration().maxConnectionsPerUID == 0)
    }

    @Test func badRulesNameTheirKey() {
        #expect(configurationProblem(#"{"allow": {"vehicle": {"user": ["x"]}}}"#)?.key == "allow.vehicle.user")
        #expect(configurationProblem(#"{"allow": {"vehicle": ["x"]}}"#)?.key == "allow.vehicle")
        #expect(
            configurationProblem(#"{"allow": {"vehicle": {"users": [-1]}}}"#)?.key.hasPrefix("allow.vehicle.users")
                == true
        )
        #expect(
            configurationProblem(#"{"allow": {"vehicle": {"users": [1.5]}}}"#)?.key.hasPrefix("allow.vehicle.users")
                == true
        )
        #expect(configurationProblem(#"{"allow": {"vehicle": {"users": ["two words"]}}}"#) != nil)
        #expect(configurationProblem(#"{"admin": {"groups": [true]}}"#)?.key.hasPrefix("admin.groups") == true)
        #expect(configurationProblem(#"{"allow": {"Vehicle!": {"users": [1]}}}"#)?.key == "allow.Vehicle!")
        #expect(configurationProblem(#"{"max_connections_per_uid": -1}"#)?.key == "max_connections_per_uid")
        #expect(configurationProblem(#"{"max_connections_per_uid": 1.5}"#)?.key == "max_connections_per_uid")
        #expect(configurationProblem(#"{"request_timeout": 0}"#)?.key == "request_timeout")
        #expect(configurationProblem(#"{"refetch_guard": 301}"#)?.key == "refetch_guard")
    }

    @Test func aMisspeltKindIsRefusedSoTheRealOneIsNotLeftOpen() {
        let error = configurationProblem(#"{"demo": true, "allow": {"vehicles": {"users": ["dispatcher"]}}}"#)
        #expect(error?.key == "allow.vehicles")
        #expect(error?.reason.contains("not configured") == true)
        #expect(
            configurationProblem(#"{"demo": true, "allow": {"vehicle": {"users": ["dispatcher"]}}}"#) == nil,
            "the demo issuer serves vehicle"
        )
        let http = #"{"providers": {"scooter": {"url": "http://p/{id}"}}, "allow": {"scooter": {"users": [1]}}}"#
        #expect(configurationProblem(http) == nil)
        let notServed = #"{"providers": {"scooter": {"url": "http://p/{id}"}}, "allow": {"vehicle": {"users": [1]}}}"#
        #expect(configurationProblem(notServed)?.key == "allow.vehicle", "only the HTTP kinds are served then")
    }

    @Test func namesResolveToNumbers() throws {
        let configuration = AccessConfiguration(
            allow: [
                "vehicle": PrincipalList(users: [.name("dispatcher"), .number(7)], groups: [.name("fleet-vehicles")])
            ],
            admin: PrincipalList(groups: [.name("fleet-admins")])
        )
        let (rules, warnings) = try AccessRules.resolve(
            configuration,
            agentUID: 999,
            resolver: TableResolver(),
            strict: true
        )
        #expect(warnings.isEmpty)
        #expect(rules.allow["vehicle"] == AccessRules.Principals(uids: [1001, 7], gids: [2001]))
        #expect(rules.admin == AccessRules.Principals(gids: [2002]))
    }

    @Test func anUnknownNameWarnsAtStartAndFailsAReload() throws {
        let configuration = AccessConfiguration(
            allow: [
                "vehicle": PrincipalList(users: [.name("ghost"), .name("dispatcher")], groups: [.name("nogroup-x")])
            ]
        )
        let (rules, warnings) = try AccessRules.resolve(
            configuration,
            agentUID: 999,
            resolver: TableResolver(),
            strict: false
        )
        #expect(warnings.count == 2)
        #expect(warnings.first?.contains("user ghost does not exist") == true)
        #expect(rules.allow["vehicle"] == AccessRules.Principals(uids: [1001]), "the unknown names match nobody")
        #expect(!rules.allows(PeerCredentials(pid: 1, uid: 4242, gid: 4242), kind: "vehicle"))
        #expect(throws: ConfigurationError(key: "allow.vehicle.users", "user ghost does not exist")) {
            try AccessRules.resolve(configuration, agentUID: 999, resolver: TableResolver(), strict: true)
        }
    }

    @Test func whoMayAsk() {
        let rules = AccessRules(
            allow: ["vehicle": AccessRules.Principals(uids: [1001], gids: [2001])],
            admin: AccessRules.Principals(gids: [2002]),
            agentUID: 999
        )
        let dispatcher = PeerCredentials(pid: 10, uid: 1001, gid: 1001)
        let member = PeerCredentials(pid: 11, uid: 1500, gid: 1500, groups: [100, 2001])
        let primary = PeerCredentials(pid: 12, uid: 1501, gid: 2001)
        let stranger = PeerCredentials(pid: 13, uid: 1502, gid: 1502, groups: [100])
        #expect(rules.allows(dispatcher, kind: "vehicle"))
        #expect(rules.allows(member, kind: "vehicle"), "by supplementary group")
        #expect(rules.allows(primary, kind: "vehicle"), "by primary group")
        #expect(!rules.allows(stranger, kind: "vehicle"))
        #expect(rules.allows(stranger, kind: "trip"), "a kind without rules is open")
        #expect(!rules.allows(nil, kind: "vehicle"), "unknown credentials pass only open kinds")
        #expect(rules.allows(PeerCredentials(pid: 1, uid: 0, gid: 0), kind: "vehicle"), "uid 0")
        #expect(rules.allows(PeerCredentials(pid: 1, uid: 999, gid: 999), kind: "vehicle"), "the agent's own uid")
        #expect(!rules.allowsAdmin(dispatcher))
        #expect(rules.allowsAdmin(PeerCredentials(pid: 1, uid: 1503, gid: 1503, groups: [2002])))
        #expect(rules.allowsAdmin(PeerCredentials(pid: 1, uid: 0, gid: 0)))
        #expect(AccessRules.open(agentUID: 999).allowsAdmin(stranger), "no admin list: open")

        // Rules made for a configuration know its kinds: any other kind is not served under them.
        let scoped = AccessRules(allow: rules.allow, admin: nil, agentUID: 4_000_000, kinds: ["vehicle", "trip"])
        #expect(scoped.verdict(stranger, kind: "trip") == .allowed, "a configured kind without rules is open")
        #expect(scoped.verdict(stranger, kind: "vehicle") == .denied)
        #expect(scoped.verdict(dispatcher, kind: "vehicle") == .allowed)
        #expect(scoped.verdict(stranger, kind: "newk") == .notConfigured, "not open: not of this configuration")
        #expect(scoped.verdict(PeerCredentials(pid: 1, uid: 0, gid: 0), kind: "newk") == .notConfigured)
        #expect(scoped.kinds == ["trip", "vehicle"])
        #expect(rules.verdict(stranger, kind: "newk") == .allowed, "rules made without kinds judge any kind")
    }

    @Test func retryAfterReadsSecondsAndDates() {
        let now = 1_800_000_000.0
        #expect(ProviderReply.retryAfter("120", now: now) == 120)
        #expect(ProviderReply.retryAfter(" 0 ", now: now) == 0)
        let date = Date(timeIntervalSince1970: now + 90)
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        #expect(ProviderReply.retryAfter(formatter.string(from: date), now: now) == 90)
        #expect(ProviderReply.retryAfter(formatter.string(from: date), now: now + 200) == 0, "a past date: now")
        #expect(ProviderReply.retryAfter("soon", now: now) == nil)
        #expect(ProviderReply.retryAfter("-5", now: now) == nil)
        #expect(ProviderReply.retryAfter(nil, now: now) == nil)
    }
}

@Suite("The packaged example configuration")
struct ExampleConfigurationTests {
    @Test func theExampleParsesAndValidates() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let path = root.appendingPathComponent("packaging/fleet-tokend.example.json").path
        let configuration = try ConfigurationFile.load(path: path, over: AgentConfiguration())
        try configuration.validate()
        try configuration.checkAccessKinds()
        #expect(configuration.access.allow.keys.sorted() == ["server", "trip", "vehicle"])
        #expect(configuration.issuers.keys.sorted() == ["server", "trusted-driver"])
        #expect(configuration.access.admin == PrincipalList(groups: [.name("fleet-admins")]))
        #expect(configuration.providers.keys.sorted() == ["trip", "vehicle"])
    }
}
