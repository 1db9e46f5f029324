import Crypto
import Logging
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Builds the provider of each kind from a configuration, and tells on reload which kinds'
/// providers changed.
public enum ProviderSet {
    /// Providers by kind, with an identity per kind: equal identities mean an unchanged provider.
    public struct Built: Sendable {
        /// The provider of each kind.
        public var providers: [String: any TokenProvider]
        /// What each kind's provider is made of (settings, and digests of its headers or key
        /// file); never a secret itself.
        public var identities: [String: String]
        /// The host's credentials, which key-less issuers share; `nil` when no issuer is key-less.
        public var credentials: (any AccessTokenSource)?
        /// The checks a token of each kind passes when it comes from a cache snapshot instead of
        /// its provider (``SnapshotAdoption``): an HTTP kind's own (claim, `accept_wildcard`,
        /// `max_lifetime`), and for an issuer's kind the claim it signs and its lifetime (the
        /// wildcard kinds accept their `*` entries).
        public var acceptance = TokenAcceptance()

        /// A digest of each kind's identity: what a cache hand-over records, so the next process
        /// takes a kind's tokens only from the same provider (no URL or setting in clear).
        public var digests: [String: String] { identities.mapValues { ProviderSet.digest(Array($0.utf8)) } }

        /// The serving floor of each kind whose provider asks one above the agent's
        /// (``TokenProvider/servingFloor``).
        public var servingFloors: [String: Double] { providers.compactMapValues(\.servingFloor) }

        /// The kinds whose provider differs in `other`, or that `other` lacks.
        public func changedKinds(since previous: Built) -> Set<String> {
            Set(previous.identities.keys.filter { identities[$0] != previous.identities[$0] })
        }
    }

    /// The providers for `configuration`: an ``HTTPTokenProvider`` per configured kind; the local
    /// issuer (or, with nothing configured, the demo issuer) for the well-known kinds without one.
    public static func make(
        from configuration: AgentConfiguration,
        clock: any AgentClock = SystemAgentClock()
    ) throws -> [String: any TokenProvider] {
        try build(from: configuration, clock: clock).providers
    }

    /// Finds the host's credentials (Application Default Credentials); called only when some
    /// issuer is key-less.
    public typealias CredentialsDiscovery = @Sendable () throws -> any AccessTokenSource

    /// Builds the providers for `configuration`, reusing from `previous` every provider whose
    /// identity did not change (so its connections and, for the demo issuer, its key stay).
    /// Key-less issuers get their access tokens from what `discoverCredentials` finds; when it
    /// finds the same source as `previous` had (its ``AccessTokenSource/summary``), that one is
    /// kept, with its cached access token.
    public static func build(
        from configuration: AgentConfiguration,
        reusing previous: Built? = nil,
        clock: any AgentClock = SystemAgentClock(),
        discoverCredentials: CredentialsDiscovery? = nil
    ) throws -> Built {
        var claimNames = FleetEngineKinds.claimNames
        for (kind, settings) in configuration.providers {
            if let claim = settings.claim { claimNames[kind] = JWTClaims.lowercasedASCII(claim) }
        }
        let acceptance = TokenAcceptance(
            claimNames: claimNames,
            wildcardKinds: Set(configuration.providers.filter { $0.value.acceptWildcard == true }.keys),
            maxLifetimes: configuration.providers.compactMapValues(\.maxLifetime)
        )
        // Everything that can fail is read before any HTTP client exists, so a bad configuration
        // leaves nothing to shut down.
        var headersByKind: [String: [(String, String)]] = [:]
        var identities: [String: String] = [:]
        for (kind, settings) in configuration.providers.sorted(by: { $0.key < $1.key }) {
            var identity =
                "http \(settings.url) token=\(settings.tokenField ?? "") expiry=\(settings.expiryField ?? "")"
            identity += " mode=\(settings.expiryMode?.rawValue ?? "") connect=\(settings.connectTimeout ?? 2)"
            identity += " timeout=\(settings.timeout ?? 10) claim=\(claimNames[kind] ?? "")"
            identity += " wildcard=\(settings.acceptWildcard ?? false) max_lifetime=\(acceptance.maxLifetime(of: kind))"
            if let path = settings.headersFile {
                let text = try readText(path, limit: BoundedFile.headersLimit, key: "providers.\(kind).headers_file")
                headersByKind[kind] = try HeadersFile.parse(text, key: "providers.\(kind).headers_file")
                identity += " headers=\(digest(Array(text.utf8)))"
            }
            identities[kind] = identity
        }
        var issuers = try readIssuers(configuration, clock: clock)
        warnAboutExposedKeyFiles(configuration)
        for (kind, issuer) in issuers { identities[kind] = issuer.identity }
        var credentials: (any AccessTokenSource)?
        if configuration.needsHostCredentials {
            guard let discoverCredentials else {
                throw ConfigurationError(key: "issuers", "key-less signing needs the host's credentials")
            }
            let found = try discoverCredentials()
            if let kept = previous?.credentials, kept.identity == found.identity {
                credentials = kept
                Task { await found.shutdown() }
            } else {
                credentials = found
            }
            let credentialsIdentity = credentials!.identity
            for (kind, issuer) in issuers where issuer.settings.serviceAccount != nil {
                issuers[kind]!.identity += " credentials=\(credentialsIdentity)"
                identities[kind] = issuers[kind]!.identity
            }
            for (kind, identity) in accessTokenIdentities(configuration) {
                identities[kind] = identity + " credentials=\(credentialsIdentity)"
            }
        }
        var issuer: LocalIssuer?
        var issuerIdentity = ""
        if let path = configuration.issuerKeyPath {
            let data = Data(try readFile(path, limit: BoundedFile.keyLimit, key: "issuer_key"))
            issuerIdentity = "issuer key=\(digest(Array(data))) lifetime=\(configuration.issuerLifetime)"
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
            issuerIdentity = "demo lifetime=\(configuration.issuerLifetime)"
        }
        var providers: [String: any TokenProvider] = [:]
        for (kind, identity) in identities {
            if let previous, previous.identities[kind] == identity, let reused = previous.providers[kind] {
                providers[kind] = reused
                continue
            }
            if let name = AccessTokenKind.name(ofKind: kind), let credentials {
                providers[kind] = try makeAccessTokens(
                    name: String(name),
                    configuration: configuration,
                    credentials: credentials,
                    clock: clock,
                    previousBudget: previous?.providers[kind]?.signatureBudget
                )
                continue
            }
            if let issuer = issuers[kind] {
                providers[kind] = try issuer.make(
                    configuration: configuration,
                    credentials: credentials,
                    clock: clock,
                    previousBudget: previous?.providers[kind]?.signatureBudget
                )
                continue
            }
            let settings = configuration.providers[kind]!
            providers[kind] = HTTPTokenProvider(
                urlTemplate: settings.url,
                headers: headersByKind[kind] ?? [],
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
        if !issuerIdentity.isEmpty {
            for kind in FleetEngineKinds.all where providers[kind] == nil && issuers[kind] == nil {
                let identity = "\(issuerIdentity) claim=\(claimNames[kind] ?? "")"
                identities[kind] = identity
                if let previous, previous.identities[kind] == identity, let reused = previous.providers[kind] {
                    providers[kind] = reused
                } else {
                    if issuer == nil {
                        issuer = try LocalIssuer.demo(
                            lifetime: configuration.issuerLifetime,
                            claimNames: claimNames,
                            clock: clock
                        )
                    }
                    providers[kind] = issuer
                }
            }
        }
        var built = Built(providers: providers, identities: identities, credentials: credentials)
        built.acceptance = adoptionAcceptance(
            acceptance,
            issuers: issuers,
            localKinds: issuerIdentity.isEmpty
                ? [] : FleetEngineKinds.all.filter { configuration.providers[$0] == nil && issuers[$0] == nil },
            localLifetime: configuration.issuerLifetime
        )
        return built
    }

    /// The acceptance of the HTTP kinds (`http`), widened to the issuers' kinds: each per-id kind
    /// with the claim its issuer signs, each wildcard kind with its `*` entries, and the lifetime
    /// of its tokens as their longest.
    private static func adoptionAcceptance(
        _ http: TokenAcceptance,
        issuers: [String: ConfiguredIssuer],
        localKinds: [String],
        localLifetime: Double
    ) -> TokenAcceptance {
        var acceptance = http
        for (kind, issuer) in issuers {
            if IssuerClaims.wildcardEntries[kind] != nil {
                acceptance.claimNames[kind] = nil
                acceptance.wildcardKinds.insert(kind)
            } else {
                acceptance.claimNames[kind] = issuer.claims.claimNames[kind]
            }
            acceptance.maxLifetimes[kind] = issuer.lifetime
        }
        for kind in localKinds { acceptance.maxLifetimes[kind] = localLifetime }
        return acceptance
    }

    /// The bytes of the file at `path` named by setting `key`, at most `limit` of them
    /// (``BoundedFile``); the error names the key, the file and, past it, the limit.
    static func readFile(_ path: String, limit: Int, key: String) throws(ConfigurationError) -> [UInt8] {
        do {
            return try BoundedFile.read(path, limit: limit)
        } catch {
            throw ConfigurationError(key: key, "\(error)")
        }
    }

    /// The UTF-8 text of the file at `path`, as ``readFile(_:limit:key:)``.
    private static func readText(_ path: String, limit: Int, key: String) throws(ConfigurationError) -> String {
        guard let text = String(validating: try readFile(path, limit: limit, key: key), as: UTF8.self) else {
            throw ConfigurationError(key: key, "\(path) is not UTF-8 text")
        }
        return text
    }

    static func digest(_ bytes: [UInt8]) -> String {
        SHA256.hash(data: bytes).prefix(8).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}

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

extension ProviderSet {
    /// Warns (once per file and mode) about each service-account key file the configuration names
    /// (`issuer_key`, `issuers.<kind>.key_file`) that its group or others may read.
    static func warnAboutExposedKeyFiles(
        _ configuration: AgentConfiguration,
        logger: Logger = Logger(label: "fleet-tokend.issuer")
    ) {
        if let path = configuration.issuerKeyPath {
            SecretFilePermissions.warnIfReadableByOthers(path, what: "issuer_key", logger: logger)
        }
        for (kind, settings) in configuration.issuers.sorted(by: { $0.key < $1.key }) {
            guard let path = settings.keyFile else { continue }
            SecretFilePermissions.warnIfReadableByOthers(path, what: "issuers.\(kind).key_file", logger: logger)
        }
    }
}
