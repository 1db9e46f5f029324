import TokenWire

extension ProviderSet {
    /// What each access-token entry's provider is made of, by the entry's kind: its settings and
    /// `iam_endpoint` (the host's credentials are added by the caller); never a secret.
    static func accessTokenIdentities(_ configuration: AgentConfiguration) -> [String: String] {
        var identities: [String: String] = [:]
        for (name, settings) in configuration.accessTokens {
            let kind = AccessTokenKind.kind(name: name)
            switch settings.source ?? .impersonation {
            case .host:
                identities[kind] = "access host"
            case .impersonation:
                var identity = "access account=\(settings.serviceAccount ?? "")"
                identity += " scopes=\((settings.scopes ?? AccessTokenSettings.defaultScopes).joined(separator: ","))"
                identity += " lifetime=\(settings.lifetime ?? AccessTokenSettings.maxLifetime)"
                identity += " delegates=\((settings.delegates ?? []).joined(separator: ","))"
                identity += " budget=\(settings.callsPerMinute.map { "\(Int($0))" } ?? "default")"
                identity += " endpoint=\(configuration.iamEndpoint)"
                identities[kind] = identity
            }
        }
        return identities
    }

    /// The provider of the access-token entry `name`: ``HostAccessTokens`` for the host's own
    /// token, ``ImpersonatedAccessTokens`` otherwise, with its budget of `generateAccessToken`
    /// calls (kept, or carried into a new one, from `previousBudget` as an issuer's is).
    static func makeAccessTokens(
        name: String,
        configuration: AgentConfiguration,
        credentials: any AccessTokenSource,
        clock: any AgentClock,
        previousBudget: SignatureBudget?
    ) throws -> any TokenProvider {
        guard let settings = configuration.accessTokens[name] else {
            throw ConfigurationError(key: "access_tokens.\(name)", "is not configured")
        }
        if settings.source == .host { return HostAccessTokens(name: name, credentials: credentials, clock: clock) }
        guard let account = settings.serviceAccount else {
            throw ConfigurationError(key: "access_tokens.\(name).service_account", "is required")
        }
        let perMinute = settings.callsPerMinute.map { Int($0) } ?? AccessTokenSettings.defaultCallsPerMinute
        let budget =
            previousBudget.flatMap { $0.perMinute == perMinute ? $0 : nil }
            ?? SignatureBudget(perMinute: perMinute, clock: clock, carrying: previousBudget)
        return ImpersonatedAccessTokens(
            name: name,
            account: account,
            scopes: settings.scopes ?? AccessTokenSettings.defaultScopes,
            lifetime: settings.lifetime ?? AccessTokenSettings.maxLifetime,
            delegates: settings.delegates ?? [],
            endpoint: try EndpointSecurity.check(url: configuration.iamEndpoint, key: "iam_endpoint"),
            credentials: credentials,
            budget: budget,
            clock: clock
        )
    }
}
