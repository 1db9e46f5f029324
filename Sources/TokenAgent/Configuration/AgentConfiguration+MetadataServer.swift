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

    /// The endpoint's settings, checked: `listen` a loopback IP literal with a port from 1 to
    /// 65535, `default` an entry of `access_tokens` that is not the host's own token, `project_id`
    /// a project id. `nil` without `metadata_server`.
    /// - Throws: ``ConfigurationError`` naming the key under `metadata_server`.
    public func metadataServerConfiguration() throws -> MetadataServerConfiguration? {
        guard let settings = metadataServer else { return nil }
        do {
            let listen = try MetadataListenAddress(parsing: settings.listen)
            guard listen.port != 0 else {
                throw MetadataConfigurationError(key: "listen", "the port must be a number from 1 to 65535")
            }
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
