import TokenWire

extension AgentConfiguration {
    /// The most signatures a minute an issuer may be given (a project's whole IAM quota).
    public static let maxSignsPerMinute = 60_000

    /// Checks `issuers` and `iam_endpoint`; throws the first problem, naming its key.
    func validateIssuers() throws {
        if !issuers.isEmpty || !accessTokens.isEmpty || iamEndpoint != Self.defaultIAMEndpoint {
            try EndpointSecurity.check(url: iamEndpoint, key: "iam_endpoint")
        }
        for kind in issuers.keys.sorted() {
            let settings = issuers[kind]!
            let key = "issuers.\(kind)"
            guard TokenIdentifier.isWellFormedKind(kind) else {
                throw ConfigurationError(key: key, "kind names are 1 to 32 of a-z, 0-9 and -")
            }
            guard kind != AccessTokenKind.wireKind else { throw Self.reservedAccessKind(key: key) }
            guard providers[kind] == nil else {
                throw ConfigurationError(
                    key: key,
                    "kind \(kind) is also under providers; a kind has either a provider or an issuer"
                )
            }
            switch (settings.keyFile, settings.serviceAccount) {
            case (nil, nil), (.some, .some):
                throw ConfigurationError(key: key, "needs exactly one of key_file and service_account")
            case (let path?, nil):
                guard !path.isEmpty else { throw ConfigurationError(key: key + ".key_file", "must be a path") }
            case (nil, let email?):
                guard Self.isServiceAccountEmail(email) else {
                    throw ConfigurationError(
                        key: key + ".service_account",
                        "must be a service account's email, such as name@project.iam.gserviceaccount.com"
                    )
                }
            }
            if let lifetime = settings.lifetime, !(lifetime >= 60 && lifetime <= 3600) {
                throw ConfigurationError(key: key + ".lifetime", "must be seconds from 60 to 3600")
            }
            if let budget = settings.signsPerMinute {
                guard budget.rounded() == budget, budget >= 1, budget <= Double(Self.maxSignsPerMinute) else {
                    throw ConfigurationError(
                        key: key + ".signs_per_minute",
                        "must be a whole number from 1 to \(Self.maxSignsPerMinute)"
                    )
                }
            }
            let wildcard = TokenIdentifier.wildcardKinds.contains(kind)
            if let claim = settings.claim {
                guard !wildcard else {
                    throw ConfigurationError(key: key + ".claim", "kind \(kind) has a fixed authorization; no claim")
                }
                guard IssuerClaims.isClaimName(claim) else {
                    throw ConfigurationError(key: key + ".claim", "must be 1 to 64 of a-z and 0-9")
                }
            } else if !wildcard, FleetEngineKinds.claimNames[kind] == nil {
                throw ConfigurationError(
                    key: key + ".claim",
                    "kind \(kind) is not a Fleet Engine kind; name the authorization claim its tokens carry"
                )
            }
        }
    }

    /// Whether `text` looks like a service account's email: `name@domain`, of letters, digits and
    /// `-_.`, at most 254 bytes. Anything else could not be a path segment of `signJwt`'s URL.
    static func isServiceAccountEmail(_ text: String) -> Bool {
        let parts = text.split(separator: "@", omittingEmptySubsequences: false)
        guard text.utf8.count <= 254, parts.count == 2, !parts[0].isEmpty, parts[1].contains(".") else { return false }
        return text.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x2D || byte == 0x5F || byte == 0x2E || byte == 0x40
        } && !parts[1].hasPrefix(".") && !parts[1].hasSuffix(".") && !text.contains("..")
    }
}
