import Foundation
import TestSupport
import Testing
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// The keys and rules for running in a container: `trust_root`, numeric `socket_group`,
/// `watch_config` and what the watcher looks at.
@Suite("Container configuration")
struct ContainerConfigurationTests {
    /// Reads `json` over a configuration that runs the demo issuer (these keys need something to
    /// serve) and validates it.
    private func parse(_ json: String) throws -> AgentConfiguration {
        var base = AgentConfiguration()
        base.demo = true
        let configuration = try ConfigurationFile.parse(Data(json.utf8), over: base)
        try configuration.validate()
        return configuration
    }

    @Test func keysAndTheirDefaults() throws {
        let defaults = AgentConfiguration()
        #expect(defaults.access.trustRoot, "on hosts root stays trusted")
        #expect(!defaults.watchConfig)
        #expect(defaults.watchInterval == 2)
        let configuration = try parse(
            #"{"trust_root": false, "watch_config": true, "watch_interval": 0.5, "socket_group": 10200}"#
        )
        #expect(!configuration.access.trustRoot)
        #expect(configuration.watchConfig)
        #expect(configuration.watchInterval == 0.5)
        #expect(configuration.socketGroup == "10200", "a number is a gid")
        #expect(try parse(#"{"socket_group": "10200"}"#).socketGroup == "10200")
        #expect(try parse(#"{"socket_group": "fleet-tokens"}"#).socketGroup == "fleet-tokens")
        for (json, key) in [
            (#"{"trust_root": "no"}"#, "trust_root"),
            (#"{"watch_config": 1}"#, "watch_config"),
            (#"{"watch_interval": 0}"#, "watch_interval"),
            (#"{"watch_interval": 7200}"#, "watch_interval"),
            (#"{"socket_group": -1}"#, "socket_group"),
            (#"{"socket_group": 1.5}"#, "socket_group"),
            (#"{"socket_group": "two words"}"#, "socket_group"),
            (#"{"socket_group": "4294967295"}"#, "socket_group"),
            (#"{"socket_group": 4294967295}"#, "socket_group"),
            (#"{"allow": {"vehicle": {"users": ["4294967295"]}}}"#, "allow.vehicle.users.0"),
        ] {
            #expect(throws: ConfigurationError.self, "\(json)") { try parse(json) }
            do {
                _ = try parse(json)
            } catch let error as ConfigurationError {
                #expect(error.key == key, "\(json): \(error)")
            }
        }
    }

    @Test func withoutTrustRootUIDZeroIsAnOrdinaryUID() throws {
        let allow = ["vehicle": AccessRules.Principals(uids: [1001])]
        let admin = AccessRules.Principals(uids: [1001])
        let root = PeerCredentials(pid: 0, uid: 0, gid: 0)
        let trusting = AccessRules(allow: allow, admin: admin, agentUID: 999)
        let strict = AccessRules(allow: allow, admin: admin, agentUID: 999, trustRoot: false)
        #expect(trusting.allows(root, kind: "vehicle"))
        #expect(trusting.allowsAdmin(root))
        #expect(!strict.allows(root, kind: "vehicle"))
        #expect(!strict.allowsAdmin(root))
        #expect(strict.allows(root, kind: "trip"), "a kind without rules stays open to root too")
        let sameNamespace = PeerCredentials(pid: 7, uid: 999, gid: 999, inAgentPIDNamespace: true)
        #expect(strict.allows(sameNamespace, kind: "vehicle"), "the agent's uid in its PID namespace")
        #expect(strict.allowsAdmin(sameNamespace))
        // In a child PID namespace the peer's pid is visible (positive), but it is not the
        // agent's namespace: a container running as the agent's uid.
        let childNamespace = PeerCredentials(pid: 7, uid: 999, gid: 999, inAgentPIDNamespace: false)
        #expect(!strict.allows(childNamespace, kind: "vehicle"))
        #expect(!strict.allowsAdmin(childNamespace))
        // The agent's uid from outside its PID namespace (pid 0): any pod may run as that uid.
        #expect(!strict.allows(PeerCredentials(pid: 0, uid: 999, gid: 999), kind: "vehicle"))
        #expect(!strict.allowsAdmin(PeerCredentials(pid: 0, uid: 999, gid: 999)))
        #expect(trusting.allows(PeerCredentials(pid: 0, uid: 999, gid: 999), kind: "vehicle"), "on a host it passes")
        #expect(strict.allows(PeerCredentials(pid: 0, uid: 1001, gid: 1001), kind: "vehicle"), "rules by uid hold")
        let named = AccessRules(
            allow: ["vehicle": AccessRules.Principals(uids: [0])],
            admin: nil,
            agentUID: 999,
            trustRoot: false
        )
        #expect(named.allows(root, kind: "vehicle"), "root named by a rule")
        // Switching trust changes who reads every kind: every kind's segment is renewed.
        #expect(trusting.kindsWithChangedRules(to: strict, kinds: ["vehicle", "trip"]) == ["vehicle", "trip"])
        #expect(trusting != strict)
    }

    @Test func resolvedRulesCarryTrustRoot() throws {
        let configuration = AccessConfiguration(
            allow: ["vehicle": PrincipalList(users: [.number(1001)], groups: [.number(10201)])],
            trustRoot: false
        )
        let rules = try AccessRules.resolve(configuration, agentUID: 999, strict: true).rules
        #expect(!rules.trustRoot)
        #expect(!rules.allows(PeerCredentials(pid: 0, uid: 0, gid: 0), kind: "vehicle"))
        #expect(rules.allows(PeerCredentials(pid: 0, uid: 4242, gid: 4242, groups: [10201]), kind: "vehicle"))
    }

    @Test func aKubernetesSymbolicLinkSwapIsAChange() throws {
        let directory = NSTemporaryDirectory() + "ftd-watch-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory + "/..g1", withIntermediateDirectories: true)
        try "{}".write(toFile: directory + "/..g1/config.json", atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: directory + "/..data", withDestinationPath: "..g1")
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/config.json",
            withDestinationPath: "..data/config.json"
        )
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/config.json"
        let missing = directory + "/key.json"
        let first = WatchedFiles(paths: [path, missing])
        #expect(first.states[path] != nil)
        #expect(first.states[missing] == .some(nil), "a missing file is watched as missing")
        #expect(WatchedFiles(paths: [path, missing]).changedPaths(since: first).isEmpty)

        // Same bytes, new generation: the link now leads to another inode.
        try FileManager.default.createDirectory(atPath: directory + "/..g2", withIntermediateDirectories: true)
        try "{}".write(toFile: directory + "/..g2/config.json", atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: directory + "/..tmp", withDestinationPath: "..g2")
        #expect(rename(directory + "/..tmp", directory + "/..data") == 0)
        let second = WatchedFiles(paths: [path, missing])
        #expect(second.changedPaths(since: first) == [path])

        try "{}".write(toFile: missing, atomically: false, encoding: .utf8)
        #expect(WatchedFiles(paths: [path, missing]).changedPaths(since: second) == [missing])
        #expect(WatchedFiles(paths: [path]).changedPaths(since: second) == [missing], "no longer watched")

        // What a look saw is kept for the paths it covered; others come from the later look.
        let later = WatchedFiles(paths: [path, missing])
        let merged = WatchedFiles(paths: [path]).restricted(to: later)
        #expect(merged.states[path] == second.states[path])
        #expect(merged.states[missing] == later.states[missing])
        #expect(first.restricted(to: later).states[missing] == .some(nil), "seen missing by the first look")
    }

    @Test func namedFilesAreTheOnesAReloadReads() throws {
        var configuration = AgentConfiguration()
        configuration.issuerKeyPath = "/keys/default.json"
        configuration.issuers = [
            "server": IssuerSettings(serviceAccount: "a@p.iam.gserviceaccount.com"),
            "trusted-driver": IssuerSettings(keyFile: "/keys/driver.json"),
        ]
        var provider = ProviderSettings(url: "https://p.example/v/{id}")
        provider.headersFile = "/etc/fleet-tokend/headers"
        configuration.providers = ["vehicle": provider]
        #expect(
            configuration.namedFiles(environment: ["GOOGLE_APPLICATION_CREDENTIALS": "/var/adc.json"]) == [
                "/etc/fleet-tokend/headers", "/keys/default.json", "/keys/driver.json", "/var/adc.json",
            ]
        )
        configuration.issuers["server"] = nil
        #expect(
            !configuration.namedFiles(environment: ["GOOGLE_APPLICATION_CREDENTIALS": "/var/adc.json"])
                .contains("/var/adc.json"),
            "the credentials file matters only to key-less issuers"
        )
    }

    /// The Kubernetes ConfigMap's `config.json` is a configuration the agent takes, with the
    /// container settings on.
    @Test func theKubernetesConfigMapHoldsAValidConfiguration() throws {
        let manifest = try DocText.read("packaging/kubernetes/configmap.yaml")
        let lines = manifest.components(separatedBy: "\n")
        let start = try #require(lines.firstIndex { $0.trimmingCharacters(in: .whitespaces) == "config.json: |" })
        let block = lines[(start + 1)...].prefix { $0.hasPrefix("    ") || $0.isEmpty }
        let configuration = try ConfigurationFile.parse(
            Data(block.joined(separator: "\n").utf8),
            over: AgentConfiguration()
        )
        try configuration.validate()
        try configuration.checkAccessKinds()
        #expect(!configuration.access.trustRoot)
        #expect(configuration.watchConfig)
        #expect(configuration.socketGroup.flatMap { UInt32($0) } != nil, "a numeric socket group")
        for (kind, list) in configuration.access.allow {
            for reference in list.users + list.groups {
                guard case .number = reference else {
                    Issue.record("allow.\(kind) names \(reference): the image knows no names")
                    continue
                }
            }
        }
    }
}
