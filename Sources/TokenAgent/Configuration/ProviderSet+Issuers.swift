#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

extension ProviderSet {
    /// One kind's issuer as configured: a key-file issuer already read (it holds no connection),
    /// a key-less one not made yet.
    struct ConfiguredIssuer {
        var kind: String
        var settings: IssuerSettings
        /// What the issuer is made of: equal identities mean an unchanged issuer.
        var identity: String
        /// The issuer of a key file, made from it when it was read.
        var local: LocalIssuer?
        var lifetime: Double
        var claims: IssuerClaims

        /// The issuer: a ``LocalIssuer`` for a key file, an ``IAMSigner`` for a service account.
        /// - Parameter previousBudget: the budget the kind's provider had before a reload: kept
        ///   when the rate is the same, carried into the new one when it changed, so that a
        ///   reload never hands a kind a fresh minute of signatures.
        func make(
            configuration: AgentConfiguration,
            credentials: (any AccessTokenSource)?,
            clock: any AgentClock,
            previousBudget: SignatureBudget? = nil
        ) throws -> any TokenProvider {
            // Each issuer its own budget: a key-less one always (the project's IAM quota), a key
            // file only when it sets one.
            let perMinute = settings.signsPerMinute.map { Int($0) }
            func budget(_ perMinute: Int) -> SignatureBudget {
                if let previousBudget, previousBudget.perMinute == perMinute { return previousBudget }
                return SignatureBudget(perMinute: perMinute, clock: clock, carrying: previousBudget)
            }
            if var local {
                local.signatureBudget = perMinute.map(budget)
                return local
            }
            guard let account = settings.serviceAccount, let credentials else {
                throw ConfigurationError(key: "issuers.\(kind)", "needs exactly one of key_file and service_account")
            }
            let budget = budget(perMinute ?? IssuerSettings.defaultSignsPerMinute)
            return IAMSigner(
                account: account,
                endpoint: try EndpointSecurity.check(url: configuration.iamEndpoint, key: "iam_endpoint"),
                claims: claims,
                lifetime: lifetime,
                credentials: credentials,
                signatureBudget: budget,
                clock: clock
            )
        }
    }

    /// Reads every configured issuer's settings and key file; no HTTP client is made yet, so a bad
    /// configuration leaves nothing to shut down.
    static func readIssuers(_ configuration: AgentConfiguration, clock: any AgentClock) throws -> [String:
        ConfiguredIssuer]
    {
        var issuers: [String: ConfiguredIssuer] = [:]
        for (kind, settings) in configuration.issuers.sorted(by: { $0.key < $1.key }) {
            var claimNames = FleetEngineKinds.claimNames
            if let claim = settings.claim { claimNames[kind] = claim }
            let lifetime = settings.lifetime ?? configuration.issuerLifetime
            var identity = "issuer lifetime=\(lifetime) claim=\(claimNames[kind] ?? "*")"
            identity += " budget=\(settings.signsPerMinute.map { "\(Int($0))" } ?? "default")"
            let claims = IssuerClaims(claimNames: claimNames)
            var local: LocalIssuer?
            if let path = settings.keyFile {
                let data = Data(try readFile(path, limit: BoundedFile.keyLimit, key: "issuers.\(kind).key_file"))
                // Read now, so a bad key is a configuration error at start and at reload.
                do {
                    local = try LocalIssuer(serviceAccountJSON: data, lifetime: lifetime, claims: claims, clock: clock)
                } catch {
                    throw ConfigurationError(key: "issuers.\(kind).key_file", "\(error)")
                }
                identity += " key=\(digest(Array(data)))"
            } else if let account = settings.serviceAccount {
                identity += " account=\(account) endpoint=\(configuration.iamEndpoint)"
            }
            issuers[kind] = ConfiguredIssuer(
                kind: kind,
                settings: settings,
                identity: identity,
                local: local,
                lifetime: lifetime,
                claims: claims
            )
        }
        return issuers
    }
}
