import Foundation

/// Builds the provider of each kind from a configuration.
public enum ProviderSet {
    /// The providers for `configuration`: an ``HTTPTokenProvider`` per configured kind; the local
    /// issuer (or, with nothing configured, the demo issuer) for the well-known kinds without one.
    public static func make(
        from configuration: AgentConfiguration,
        clock: any AgentClock = SystemAgentClock()
    ) throws -> [String: any TokenProvider] {
        var claimNames = FleetEngineKinds.claimNames
        for (kind, settings) in configuration.providers {
            if let claim = settings.claim { claimNames[kind] = claim.lowercased() }
        }
        let acceptance = TokenAcceptance(claimNames: claimNames)
        // Everything that can fail is read before any HTTP client exists, so a bad configuration
        // leaves nothing to shut down.
        var headersByKind: [String: [(String, String)]] = [:]
        for (kind, settings) in configuration.providers {
            if let path = settings.headersFile {
                headersByKind[kind] = try HeadersFile.load(path: path, key: "providers.\(kind).headers_file")
            }
        }
        let issuer: LocalIssuer?
        if let path = configuration.issuerKeyPath {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw ConfigurationError(key: "issuer_key", "cannot read \(path)")
            }
            do {
                issuer = try LocalIssuer(
                    serviceAccountJSON: data,
                    lifetime: configuration.issuerLifetime,
                    claimNames: claimNames,
                    clock: clock
                )
            } catch {
                throw ConfigurationError(key: "issuer_key", "\(error)")
            }
        } else if configuration.usesDemoIssuer {
            issuer = try LocalIssuer.demo(lifetime: configuration.issuerLifetime, claimNames: claimNames, clock: clock)
        } else {
            issuer = nil
        }
        var providers: [String: any TokenProvider] = [:]
        for (kind, settings) in configuration.providers {
            let headers = headersByKind[kind] ?? []
            providers[kind] = HTTPTokenProvider(
                urlTemplate: settings.url,
                headers: headers,
                reply: ProviderReply(
                    tokenField: settings.tokenField,
                    expiryField: settings.expiryField,
                    expiryMode: settings.expiryMode ?? .absolute
                ),
                acceptance: acceptance,
                connectTimeout: settings.connectTimeout ?? 2,
                timeout: settings.timeout ?? 10,
                clock: clock
            )
        }
        if let issuer {
            for kind in FleetEngineKinds.all where providers[kind] == nil { providers[kind] = issuer }
        }
        return providers
    }
}
