import Testing
import TokenAgent
import TokenWire

/// `metadata_server` as the config file gives it: its exact keys, every mistake refused naming its
/// key, the entries the endpoint serves (each with its own rules only), and what a reload applies.
@Suite("Metadata server: configuration")
struct MetadataServerConfigurationTests {
    static let admin = "fleet-admin@fleet-prod.iam.gserviceaccount.com"
    static let entries =
        #""access_tokens": {"fleet-admin": {"service_account": "\#(admin)", "allow": {"users": [1201, 1203]}},"#
        + #" "mine": {"source": "host", "allow": {"users": [1202]}}}, "allow_host_identity": true"#

    private func configuration(_ metadata: String) throws -> AgentConfiguration {
        try parseConfiguration("{\(Self.entries), \"metadata_server\": \(metadata)}")
    }

    /// The key and problem `metadata` is refused with, at parsing or validation.
    private func refusal(_ metadata: String) -> String? {
        do {
            try configuration(metadata).validate()
            return nil
        } catch let error as ConfigurationError {
            return "\(error.key): \(error.reason)"
        } catch {
            return "\(error)"
        }
    }

    @Test func theEndpointServesTheEntriesOfServiceAccountsUnderTheirOwnRules() throws {
        let configuration = try configuration(
            #"{"listen": "127.0.0.1:8989", "default": "fleet-admin", "project_id": "fleet-prod"}"#
        )
        try configuration.validate()
        let settings = try #require(try configuration.metadataServerConfiguration())
        #expect(settings.listen.description == "127.0.0.1:8989")
        #expect(settings.defaultEntry == "fleet-admin" && settings.projectID == "fleet-prod")
        let rules = AccessRules(
            allow: [
                "access:fleet-admin": AccessRules.Principals(uids: [1201, 1203]),
                "access:mine": AccessRules.Principals(uids: [1202]),
            ],
            admin: nil,
            agentUID: 0
        )
        // The host's own token is never served there; no uid is added to an entry's own.
        let entries = configuration.metadataEntries(rules: rules)
        #expect(entries.map(\.name) == ["fleet-admin"])
        #expect(entries.first?.account == Self.admin)
        #expect(entries.first?.scopes == ["https://www.googleapis.com/auth/cloud-platform"])
        #expect(entries.first?.allowedUIDs == [1201, 1203] && entries.first?.allowedGIDs == [])
        #expect(try parseConfiguration("{\(Self.entries)}").metadataServerConfiguration() == nil)
    }

    @Test(arguments: [
        (#"{"listen": "127.0.0.1:8989"}"#, "metadata_server.default: is required"),
        (#"{"default": "fleet-admin"}"#, "metadata_server.listen: is required"),
        (
            #"{"listen": "127.0.0.1:8989", "default": "fleet-admin", "port": 1}"#,
            "metadata_server.port: is not a known key"
        ),
        (#""127.0.0.1:8989""#, "metadata_server: must be of type object"),
        (
            #"{"listen": "10.0.0.1:8989", "default": "fleet-admin"}"#,
            "metadata_server.listen: 10.0.0.1 is not a loopback"
        ),
        (#"{"listen": "localhost:8989", "default": "fleet-admin"}"#, "metadata_server.listen: localhost is not an IP"),
        (
            #"{"listen": "127.0.0.1:0", "default": "fleet-admin"}"#,
            "metadata_server.listen: the port must be a number from 1 to 65535"
        ),
        (
            #"{"listen": "127.0.0.1:65536", "default": "fleet-admin"}"#,
            "metadata_server.listen: the port must be a number from 1 to 65535"
        ),
        (
            #"{"listen": "127.0.0.1:8989", "default": "fleet-admin", "request_timeout": 0}"#,
            "metadata_server.request_timeout: must be seconds from 0.1 to 60"
        ),
        (
            #"{"listen": "127.0.0.1:8989", "default": "fleet-admin", "request_timeout": 61}"#,
            "metadata_server.request_timeout: must be seconds from 0.1 to 60"
        ),
        (#"{"listen": "127.0.0.1", "default": "fleet-admin"}"#, "metadata_server.listen: needs ip:port"),
        (#"{"listen": "[::1]:8989", "default": "nobody"}"#, "metadata_server.default: nobody is not an entry"),
        (#"{"listen": "[::1]:8989", "default": "mine"}"#, "metadata_server.default: mine serves the host's own token"),
        (#"{"listen": "[::1]:8989", "default": "fleet-admin", "project_id": "A B"}"#, "metadata_server.project_id:"),
    ])
    func eachMistakeIsRefusedNamingItsKey(metadata: String, refused: String) {
        let got = refusal(metadata)
        #expect(got?.hasPrefix(refused) == true, "\(metadata): \(got ?? "accepted")")
    }

    /// The endpoint learns a connection's uid, never the asking process's groups: an entry it
    /// serves takes users only (the host's own token, never served there, keeps its groups).
    @Test func groupsOnAnEntryTheEndpointServesAreRefused() throws {
        let grouped = try parseConfiguration(
            #"{"access_tokens": {"fleet-admin": {"service_account": "\#(Self.admin)", "allow": {"users": [1201], "#
                + #""groups": [1300]}}, "mine": {"source": "host", "allow": {"groups": [1300]}}}, "#
                + #""allow_host_identity": true, "metadata_server": {"listen": "127.0.0.1:8989", "default": "fleet-admin"}}"#
        )
        #expect(throws: ConfigurationError.self) { try grouped.validate() }
        do {
            try grouped.validate()
        } catch let error as ConfigurationError {
            #expect(error.key == "access_tokens.fleet-admin.allow.groups")
            #expect(error.reason.contains("groups") && error.reason.contains("metadata endpoint (metadata_server)"))
        }
        var socketOnly = grouped
        socketOnly.metadataServer = nil
        try socketOnly.validate()
        var hostOnly = grouped
        hostOnly.accessTokens["fleet-admin"]?.allow?.groups = []
        try hostOnly.validate()
    }

    @Test func theRequestTimeoutDefaultsTo10sAndWaitsForARestart() throws {
        let startup = try configuration(#"{"listen": "127.0.0.1:8989", "default": "fleet-admin"}"#)
        #expect(startup.metadataServer?.requestTimeout == 10)
        let short = try configuration(
            #"{"listen": "127.0.0.1:8989", "default": "fleet-admin", "request_timeout": 0.5}"#
        )
        try short.validate()
        #expect(short.metadataServer?.requestTimeout == 0.5)
        let field = ReloadChanges(
            startup: startup,
            from: startup,
            previousKinds: [],
            to: short,
            kinds: [],
            providerChanged: [],
            rulesChanged: []
        ).field
        #expect(field == "restart:metadata_server")
    }

    @Test func aReloadAppliesAllButTheListenAddress() throws {
        let startup = try configuration(#"{"listen": "127.0.0.1:8989", "default": "fleet-admin"}"#)
        func changes(to next: AgentConfiguration) -> String {
            ReloadChanges(
                startup: startup,
                from: startup,
                previousKinds: [],
                to: next,
                kinds: [],
                providerChanged: [],
                rulesChanged: []
            ).field
        }
        var moved = startup
        moved.metadataServer?.listen = "127.0.0.1:8990"
        #expect(changes(to: moved) == "restart:metadata_server")
        var removed = startup
        removed.metadataServer = nil
        // Removed: the listener stays until the restart, and serves no entry from now on.
        #expect(changes(to: removed) == "restart:metadata_server,other")
        var project = startup
        project.metadataServer?.projectID = "fleet-prod"
        #expect(changes(to: project) == "other")
    }
}
