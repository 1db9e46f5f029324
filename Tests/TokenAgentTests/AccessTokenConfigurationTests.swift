import Foundation
import Testing
import TokenAgent
import TokenWire

/// `access_tokens` and `allow_host_identity` as the config file gives them: what an entry holds,
/// the kind it becomes, and every mistake refused at start naming its key.
@Suite("Access tokens: configuration")
struct AccessTokenConfigurationTests {
    static let admin = "fleet-admin@proj.iam.gserviceaccount.com"

    @Test func anEntryIsAKindOfItsOwnWithItsOwnRules() throws {
        let configuration = try parseConfiguration(
            #"{"access_tokens": {"fleet-admin": {"service_account": "\#(Self.admin)", "lifetime": 1800,"#
                + #" "scopes": ["https://www.googleapis.com/auth/cloud-platform", "openid"],"#
                + #" "delegates": ["relay@proj.iam.gserviceaccount.com"], "calls_per_minute": 30,"#
                + #" "allow": {"users": ["dispatcher", 1201], "groups": ["dispatchers"]}},"#
                + #" "eta-viewer": {"service_account": "eta@proj.iam.gserviceaccount.com", "allow": {"groups": [1300]}}},"#
                + #" "allow": {"vehicle": {"users": [1]}}, "demo": false, "issuer_key": "/k.json"}"#
        )
        try configuration.validate()
        try configuration.checkAccessKinds()
        let entry = try #require(configuration.accessTokens["fleet-admin"])
        #expect(entry.source == nil)
        #expect(entry.serviceAccount == Self.admin)
        #expect(entry.lifetime == 1800)
        #expect(entry.scopes?.count == 2)
        #expect(entry.delegates == ["relay@proj.iam.gserviceaccount.com"])
        #expect(entry.callsPerMinute == 30)
        #expect(configuration.accessTokenKinds == ["access:eta-viewer", "access:fleet-admin"])
        #expect(configuration.configuredKinds.isSuperset(of: ["access:eta-viewer", "access:fleet-admin", "vehicle"]))
        // Each entry's rules are its kind's; the top-level `allow` is kept as it is.
        let rules = configuration.accessRules
        #expect(
            rules.allow["access:fleet-admin"]
                == PrincipalList(users: [.name("dispatcher"), .number(1201)], groups: [.name("dispatchers")])
        )
        #expect(rules.allow["access:eta-viewer"] == PrincipalList(groups: [.number(1300)]))
        #expect(rules.allow["vehicle"] != nil)
        #expect(configuration.access.allow["access:fleet-admin"] == nil)
        #expect(configuration.needsHostCredentials)
        #expect(configuration.hostIdentityEntries.isEmpty)
        #expect(
            configuration.hostSigningAccounts
                == ["eta@proj.iam.gserviceaccount.com", Self.admin, "relay@proj.iam.gserviceaccount.com"]
        )
    }

    @Test func anEntryIsConfigurationEnoughWithoutDemo() throws {
        let configuration = try parseConfiguration(
            #"{"access_tokens": {"a": {"service_account": "\#(Self.admin)", "allow": {"users": [0]}}}}"#
        )
        try configuration.validate()
        #expect(configuration.hasTokenSource)
        #expect(configuration.configuredKinds == ["access:a"])
        #expect(
            configurationProblem(
                #"{"demo": true, "access_tokens": {"a": {"service_account": "\#(Self.admin)", "allow": {}}}}"#
            )?.key == "demo"
        )
    }

    @Test func theHostsOwnTokenNeedsAllowHostIdentityAndNamesWhatItCanSignFor() throws {
        let host = #"{"source": "host", "allow": {"users": ["ops"]}}"#
        #expect(configurationProblem(#"{"access_tokens": {"host": \#(host)}}"#)?.key == "access_tokens.host.source")
        let configuration = try parseConfiguration(
            #"{"access_tokens": {"host": \#(host)}, "allow_host_identity": true,"#
                + #" "issuers": {"server": {"service_account": "srv@proj.iam.gserviceaccount.com"}},"#
                + #" "allow": {"server": {"users": [0]}}}"#
        )
        try configuration.validate()
        try configuration.checkAccessKinds()
        #expect(configuration.hostIdentityEntries == ["host"])
        #expect(configuration.hostSigningAccounts == ["srv@proj.iam.gserviceaccount.com"])
        let refusal = try #require(configurationProblem(#"{"access_tokens": {"host": \#(host)}}"#))
        #expect(refusal.description.contains("allow_host_identity: true"))
    }

    @Test func eachMistakeIsNamedByItsKey() {
        let allow = #""allow": {"users": [0]}"#
        let sa = #""service_account": "\#(Self.admin)""#
        let cases: [(String, String)] = [
            (#"{"access_tokens": {"a": {\#(sa)}}}"#, "access_tokens.a.allow"),
            (#"{"access_tokens": {"a": {\#(allow)}}}"#, "access_tokens.a.service_account"),
            (#"{"access_tokens": {"a": {"service_account": "nope", \#(allow)}}}"#, "access_tokens.a.service_account"),
            (#"{"access_tokens": {"Fleet_Admin": {\#(sa), \#(allow)}}}"#, "access_tokens.Fleet_Admin"),
            (
                #"{"access_tokens": {"abcdefghijklmnopqrstuvwxyz": {\#(sa), \#(allow)}}}"#,
                "access_tokens.abcdefghijklmnopqrstuvwxyz"
            ),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "lifetime": 3601}}}"#, "access_tokens.a.lifetime"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "lifetime": 899}}}"#, "access_tokens.a.lifetime"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "scopes": []}}}"#, "access_tokens.a.scopes"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "scopes": ["a b"]}}}"#, "access_tokens.a.scopes"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "scopes": ["x", "x"]}}}"#, "access_tokens.a.scopes"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "scopes": ["x\"y"]}}}"#, "access_tokens.a.scopes"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "delegates": ["x"]}}}"#, "access_tokens.a.delegates"),
            (
                #"{"access_tokens": {"a": {\#(sa), \#(allow), "delegates": ["\#(Self.admin)", "\#(Self.admin)"]}}}"#,
                "access_tokens.a.delegates"
            ),
            (
                #"{"access_tokens": {"a": {\#(sa), \#(allow), "calls_per_minute": 0}}}"#,
                "access_tokens.a.calls_per_minute"
            ),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "source": "gce"}}}"#, "access_tokens.a.source"),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow), "scope": "x"}}}"#, "access_tokens.a.scope"),
            (#"{"access_tokens": {"a": {\#(sa), "allow": {"user": [0]}}}}"#, "access_tokens.a.allow.user"),
            (#"{"access_tokens": {"a": {\#(sa), "allow": ["x"]}}}"#, "access_tokens.a.allow"),
            (
                #"{"access_tokens": {"a": {"source": "host", \#(sa), \#(allow)}}, "allow_host_identity": true}"#,
                "access_tokens.a.service_account"
            ),
            (
                #"{"access_tokens": {"a": {"source": "host", "lifetime": 900, \#(allow)}}, "allow_host_identity": true}"#,
                "access_tokens.a.lifetime"
            ),
            (#"{"access_tokens": {"a": {\#(sa), \#(allow)}}, "iam_endpoint": "http://iam.example"}"#, "iam_endpoint"),
            // `access` names access tokens on the wire: no provider, issuer or rule may take it.
            (#"{"providers": {"access": {"url": "https://p/{id}"}}}"#, "providers.access"),
            (#"{"issuers": {"access": {"key_file": "/k", "claim": "x"}}}"#, "issuers.access"),
            (#"{"issuer_key": "/k", "allow": {"access": {"users": [0]}}}"#, "allow.access"),
            (#"{"issuer_key": "/k", "allow": {"access:a": {"users": [0]}}}"#, "allow.access:a"),
        ]
        for (json, key) in cases {
            #expect(configurationProblem(json)?.key == key, "\(json)")
        }
    }

    @Test func aReservedKindIsRefusedSayingWhy() throws {
        let problem = try #require(configurationProblem(#"{"providers": {"access": {"url": "https://p/{id}"}}}"#))
        #expect(problem.description.contains("kind access is reserved"))
        let rule = try #require(configurationProblem(#"{"issuer_key": "/k", "allow": {"access": {"users": [0]}}}"#))
        #expect(rule.description.contains("access_tokens.<name>.allow"))
    }

    @Test func theRulesOfAnEntryResolveUnderItsOwnKey() throws {
        let configuration = try parseConfiguration(
            #"{"access_tokens": {"a": {"service_account": "\#(Self.admin)", "allow": {"users": ["no-such-user-x"]}}}}"#
        )
        #expect(throws: ConfigurationError.self) {
            _ = try AccessRules.resolve(configuration.accessRules, strict: true)
        }
        do {
            _ = try AccessRules.resolve(configuration.accessRules, strict: true)
        } catch let error as ConfigurationError {
            #expect(error.key == "access_tokens.a.allow.users")
        }
    }
}
