import TokenWire

extension AgentConfiguration {
    /// The kind of each access-token entry (``AccessTokenKind``), sorted.
    public var accessTokenKinds: [String] { accessTokens.keys.sorted().map { AccessTokenKind.kind(name: $0) } }

    /// The access rules of every kind: `allow` and `admin` as configured, with each access-token
    /// entry's own `allow` under the entry's kind.
    public var accessRules: AccessConfiguration {
        var rules = access
        for (name, settings) in accessTokens {
            if let allow = settings.allow { rules.allow[AccessTokenKind.kind(name: name)] = allow }
        }
        return rules
    }

    /// The service accounts the host's identity can act as: every key-less issuer's account and
    /// every impersonated access token's account and delegates, sorted. A caller holding the
    /// host's own access token (`"source": "host"`) can mint any of their tokens at IAM.
    public var hostSigningAccounts: [String] {
        var accounts = Set(issuers.values.compactMap(\.serviceAccount))
        for settings in accessTokens.values where settings.source != .host {
            if let account = settings.serviceAccount { accounts.insert(account) }
            accounts.formUnion(settings.delegates ?? [])
        }
        return accounts.sorted()
    }

    /// The access-token entries that serve the host's own token, sorted.
    public var hostIdentityEntries: [String] { accessTokens.filter { $0.value.source == .host }.keys.sorted() }

    /// Checks `access_tokens` and `allow_host_identity`; throws the first problem, naming its key.
    func validateAccessTokens() throws {
        for name in accessTokens.keys.sorted() {
            let settings = accessTokens[name]!
            let key = "access_tokens.\(name)"
            guard AccessTokenKind.isWellFormedName(name) else {
                throw ConfigurationError(key: key, "names are 1 to \(AccessTokenKind.maxNameBytes) of a-z, 0-9 and -")
            }
            switch settings.source ?? .impersonation {
            case .host:
                guard allowHostIdentity else {
                    throw ConfigurationError(
                        key: key + ".source",
                        "the host's own token lets its holder act at IAM as every account the host signs for, past "
                            + "every kind's rules and budget; set allow_host_identity: true to serve it"
                    )
                }
                let impersonationKeys: [(String, Bool)] = [
                    ("service_account", settings.serviceAccount != nil), ("scopes", settings.scopes != nil),
                    ("lifetime", settings.lifetime != nil), ("delegates", settings.delegates != nil),
                    ("calls_per_minute", settings.callsPerMinute != nil),
                ]
                for (field, given) in impersonationKeys where given {
                    throw ConfigurationError(
                        key: "\(key).\(field)",
                        "does not apply to the host's own token (\"source\": \"host\")"
                    )
                }
            case .impersonation:
                try validateImpersonation(settings, key: key)
            }
            guard settings.allow != nil else {
                throw ConfigurationError(
                    key: key + ".allow",
                    "an access token needs an allow entry naming who may have it"
                )
            }
        }
    }

    private func validateImpersonation(_ settings: AccessTokenSettings, key: String) throws {
        guard let account = settings.serviceAccount else {
            throw ConfigurationError(
                key: key + ".service_account",
                "is required (or \"source\": \"host\" for the host's own token)"
            )
        }
        guard Self.isServiceAccountEmail(account) else {
            throw ConfigurationError(
                key: key + ".service_account",
                "must be a service account's email, such as name@project.iam.gserviceaccount.com"
            )
        }
        if let delegates = settings.delegates {
            guard delegates.count <= AccessTokenSettings.maxDelegates else {
                throw ConfigurationError(key: key + ".delegates", "at most \(AccessTokenSettings.maxDelegates)")
            }
            for delegate in delegates where !Self.isServiceAccountEmail(delegate) {
                throw ConfigurationError(
                    key: key + ".delegates",
                    "each must be a service account's email, such as name@project.iam.gserviceaccount.com"
                )
            }
            guard Set(delegates).count == delegates.count else {
                throw ConfigurationError(key: key + ".delegates", "names an account twice")
            }
        }
        if let scopes = settings.scopes {
            guard (1...AccessTokenSettings.maxScopes).contains(scopes.count) else {
                throw ConfigurationError(key: key + ".scopes", "must name 1 to \(AccessTokenSettings.maxScopes) scopes")
            }
            for scope in scopes where !AccessTokenSettings.isScope(scope) {
                throw ConfigurationError(
                    key: key + ".scopes",
                    "each must be 1 to \(AccessTokenSettings.maxScopeBytes) bytes of printable ASCII without spaces"
                )
            }
            guard Set(scopes).count == scopes.count else {
                throw ConfigurationError(key: key + ".scopes", "names a scope twice")
            }
        }
        if let lifetime = settings.lifetime,
            !(lifetime >= AccessTokenSettings.minLifetime && lifetime <= AccessTokenSettings.maxLifetime)
        {
            throw ConfigurationError(
                key: key + ".lifetime",
                "must be seconds from \(Int(AccessTokenSettings.minLifetime)) to \(Int(AccessTokenSettings.maxLifetime))"
            )
        }
        if let budget = settings.callsPerMinute {
            guard budget.rounded() == budget, budget >= 1, budget <= Double(Self.maxSignsPerMinute) else {
                throw ConfigurationError(
                    key: key + ".calls_per_minute",
                    "must be a whole number from 1 to \(Self.maxSignsPerMinute)"
                )
            }
        }
    }
}
