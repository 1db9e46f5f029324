import MetadataEndpoint
import TokenWire

extension AgentConfiguration {
    /// `metadata_server.listen`, or `nil` without the endpoint: the part of `metadata_server` a
    /// reload does not apply (``ReloadChanges/startupOnlyKeys``). Setting it without the endpoint
    /// configured makes one with no default entry; setting `nil` removes the endpoint.
    public var metadataListen: String? {
        get { metadataServer?.listen }
        set {
            guard let newValue else {
                metadataServer = nil
                return
            }
            if metadataServer == nil {
                metadataServer = MetadataServerSettings(listen: newValue, defaultEntry: "")
            } else {
                metadataServer?.listen = newValue
            }
        }
    }

    /// What of `metadata_server` is read at start-up only: its `listen` and `request_timeout`.
    public struct MetadataStartup: Sendable, Hashable {
        public var listen: String
        public var requestTimeout: Double
    }

    /// `metadata_server`'s start-up part (``MetadataStartup``), or `nil` without the endpoint
    /// (``ReloadChanges/startupOnlyKeys``); setting it sets ``metadataListen`` and the time-out.
    public var metadataStartup: MetadataStartup? {
        get { metadataServer.map { MetadataStartup(listen: $0.listen, requestTimeout: $0.requestTimeout) } }
        set {
            metadataListen = newValue?.listen
            if let newValue { metadataServer?.requestTimeout = newValue.requestTimeout }
        }
    }

    /// The endpoint's settings, checked: `listen` a loopback IP literal with a port from 1 to
    /// 65535, `default` an entry of `access_tokens` that is not the host's own token, `project_id`
    /// a project id, `request_timeout` 0.1 to 60 s; and no entry it serves may have `groups` in
    /// its `allow` (``refuseGroupRulesOnServedEntries()``). `nil` without `metadata_server`.
    /// - Throws: ``ConfigurationError`` naming the key under `metadata_server`, or the entry's
    ///   `allow.groups`.
    public func metadataServerConfiguration() throws -> MetadataServerConfiguration? {
        guard let settings = metadataServer else { return nil }
        guard settings.requestTimeout.isFinite, settings.requestTimeout >= 0.1, settings.requestTimeout <= 60 else {
            throw ConfigurationError(key: "metadata_server.request_timeout", "must be seconds from 0.1 to 60")
        }
        try refuseGroupRulesOnServedEntries()
        do {
            let listen = try MetadataListenAddress(parsing: settings.listen)
            let configuration = MetadataServerConfiguration(
                listen: listen,
                defaultEntry: settings.defaultEntry,
                projectID: settings.projectID
            )
            try configuration.validate(entryNames: Set(accessTokens.keys))
            if accessTokens[settings.defaultEntry]?.source == .host {
                throw MetadataConfigurationError(
                    key: "default",
                    "\(settings.defaultEntry) serves the host's own token (\"source\": \"host\"), which the "
                        + "metadata endpoint never serves: name an entry of a service account"
                )
            }
            return configuration
        } catch let error as MetadataConfigurationError {
            throw ConfigurationError(key: "metadata_server.\(error.key)", error.problem)
        }
    }

    /// Refuses `groups` in the `allow` of an entry the metadata endpoint serves.
    ///
    /// The socket takes a peer's groups from the asking process (`SO_PEERGROUPS`); the endpoint
    /// cannot: the kernel names a TCP socket's owner uid, not its process, and a hardened unit
    /// cannot look into other users' processes. Groups from the user database would mean
    /// something else than on the socket (a process that dropped its groups served, one given a
    /// group at run time refused), so an entry the endpoint serves is allowed to users only.
    func refuseGroupRulesOnServedEntries() throws {
        for name in accessTokens.keys.sorted() {
            let settings = accessTokens[name]!
            guard settings.source != .host, settings.serviceAccount != nil,
                let groups = settings.allow?.groups, !groups.isEmpty
            else { continue }
            throw ConfigurationError(
                key: "access_tokens.\(name).allow.groups",
                "groups are not accepted on an entry the metadata endpoint (metadata_server) serves: it can "
                    + "learn the uid owning a connection, never the asking process's groups; name the users "
                    + "instead, or serve this token on the socket only"
            )
        }
    }

    /// The entries the metadata endpoint serves under `rules`: every access-token entry of a
    /// service account (an entry of the host's own token, `"source": "host"`, is never served
    /// there), with its scopes and exactly the users and groups of its own `allow`, as `rules`
    /// resolved them. Neither uid 0 nor the agent's own uid is added: the endpoint cannot tell a
    /// peer's PID namespace, so they get only what `allow` names.
    public func metadataEntries(rules: AccessRules) -> [MetadataEntry] {
        accessTokens.keys.sorted().compactMap { name -> MetadataEntry? in
            let settings = accessTokens[name]!
            guard settings.source != .host, let account = settings.serviceAccount else { return nil }
            let principals = rules.allow[AccessTokenKind.kind(name: name)] ?? AccessRules.Principals()
            return MetadataEntry(
                name: name,
                account: account,
                scopes: settings.scopes ?? AccessTokenSettings.defaultScopes,
                allowedUIDs: principals.uids,
                allowedGIDs: principals.gids
            )
        }
    }
}
