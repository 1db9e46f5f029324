import TokenAgent

/// The one validation of a resolved configuration beyond its values, shared by `serve` at start,
/// every reload and `check-config`: the access rules name configured kinds and resolve, and every
/// kind's provider can be made (its files read: keys, headers, credentials). Nothing is started and
/// nothing is called: a provider's HTTP client makes no connection until a fetch.
enum ConfigurationCheck {
    /// What a configuration puts in force.
    struct Checked {
        var rules: AccessRules
        /// Rules that match nobody yet (a name that does not resolve), when names need not.
        var warnings: [String]
        var providers: ProviderSet.Built
    }

    /// Checks `configuration`. `strictNames`: a user or group name that does not resolve is an
    /// error (a reload: a typo must not lock users out) rather than a warning (a start: NSS or
    /// LDAP may come up after the agent). `previous`: the providers in force, kept where unchanged.
    static func check(
        _ configuration: AgentConfiguration,
        strictNames: Bool,
        reusing previous: ProviderSet.Built? = nil,
        discoverCredentials: ProviderSet.CredentialsDiscovery? = nil
    ) throws -> Checked {
        try configuration.checkAccessKinds()
        let resolved = try AccessRules.resolve(
            configuration.accessRules,
            kinds: configuration.configuredKinds,
            strict: strictNames
        )
        // Last: nothing that can fail comes after the providers' HTTP clients exist.
        let providers = try ProviderSet.build(
            from: configuration,
            reusing: previous,
            discoverCredentials: discoverCredentials
        )
        return Checked(rules: resolved.rules, warnings: resolved.warnings, providers: providers)
    }
}
