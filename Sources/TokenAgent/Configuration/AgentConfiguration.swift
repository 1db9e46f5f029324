import MetadataEndpoint
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Everything `fleet-tokend serve` is configured with: the config file's keys, overridden by flags.
public struct AgentConfiguration: Sendable, Hashable {
    /// The default socket path when neither a flag, the file nor `$FLEET_TOKEND_SOCKET` names one.
    public static let defaultSocketPath = AgentDefaults.socketPath

    /// The Unix socket path to listen on.
    public var socketPath: String
    /// The socket file's mode (default `0660`).
    public var socketMode: UInt32 = 0o660
    /// The group of the socket file (default: the process's own).
    public var socketGroup: String?
    /// The HTTP provider of each kind.
    public var providers: [String: ProviderSettings] = [:]
    /// The issuer of each kind that has one of its own (`issuers`): a key file or a service
    /// account signing key-less through IAM Credentials.
    public var issuers: [String: IssuerSettings] = [:]
    /// The OAuth 2.0 access tokens served as `access <name>` (`access_tokens`), by entry name.
    public var accessTokens: [String: AccessTokenSettings] = [:]
    /// Whether an access-token entry may serve the host's own token (`allow_host_identity`).
    public var allowHostIdentity = false
    /// The IAM Credentials API that key-less issuers and access tokens call (`iam_endpoint`).
    public var iamEndpoint = AgentConfiguration.defaultIAMEndpoint
    /// Google's IAM Credentials API.
    public static let defaultIAMEndpoint = "https://iamcredentials.googleapis.com"
    /// A Google service-account JSON key; when set, the local issuer mints tokens for the
    /// well-known kinds that have no HTTP provider and no issuer of their own.
    public var issuerKeyPath: String?
    /// The lifetime of locally minted tokens, seconds (at most 3600).
    public var issuerLifetime: Double = 3600
    /// Seconds before expiry that a background refresh aims for.
    public var refreshMargin: Double = 600
    /// Default minimum validity of a served token, seconds.
    public var minValidity: Double = 300
    /// Entries not read for this long are not refreshed, seconds.
    public var idleTimeout: Double = 600
    /// A token fetched this recently is not fetched again by a plain REFRESH, seconds.
    public var refetchGuard: Double = 5
    /// How long a provider's refusal of an id is remembered, seconds.
    public var rejectionMemory: Double = 5
    /// Whether workers may read tokens through shared-memory segments (docs/SHM.md).
    public var sharedMemory = true
    /// The most bytes the shared-memory segments may take together, retired generations a reader
    /// still holds included (default 512 MiB).
    public var sharedMemoryMaxBytes = 512 << 20
    /// How old a kind's segment gets before a new generation replaces it (rules are checked again
    /// at least this often), seconds (default 15 minutes).
    public var sharedMemoryRotation: Double = 900
    /// The most cache entries.
    public var maxEntries = 100_000
    /// The most concurrent fetches to one kind's provider.
    public var maxConcurrentFetches = 16
    /// The most fetches of one kind waiting for a place at its provider.
    public var maxQueuedFetches = 10_000
    /// The most first fetches one uid's requests may have waiting for a place.
    public var maxQueuedFetchesPerUID = 1_000

    /// The bounds on fetches these settings describe.
    public var fetchLimits: FetchLimits {
        FetchLimits(
            concurrentPerKind: maxConcurrentFetches,
            queuedPerKind: maxQueuedFetches,
            queuedPerUID: maxQueuedFetchesPerUID,
            budgetWait: requestTimeout
        )
    }
    /// The most client connections at once.
    public var maxConnections = 1024
    /// Who may ask for which kinds, and who may use the operator verbs.
    public var access = AccessConfiguration()
    /// Seconds a partial request line may wait for its end while the agent reads; then the
    /// connection gets `ERR bad-request request timed out` and is closed.
    public var requestTimeout: Double = 10
    /// Seconds a client may leave its replies unread (the agent's output for it at its bound)
    /// before the connection is closed.
    public var stallTimeout: Double = 30
    /// The most connections one uid may hold at once; 0 for no per-uid limit.
    public var maxConnectionsPerUID = 0
    /// The log level: trace, debug, info, notice, warning, error, critical. Applied again on
    /// every reload.
    public var logLevel = "info"
    /// Where the HTTP metrics listener listens (`host:port`); `nil`: no listener (the default).
    public var metricsListen: String?
    /// A kind whose provider has failed for this long, seconds, makes the agent degraded.
    public var degradedAfter: Double = 120
    /// The refresher counts as stalled when it has not completed a pass for this long, seconds.
    public var refresherStallAfter: Double = 10
    /// How long the HTTP metrics listener waits for a request's head, seconds.
    public var metricsHeadTimeout: Double = 5
    /// Whether the agent watches its config file and the files it names, and reloads when one
    /// changes (`watch_config`): for Kubernetes, whose ConfigMap updates arrive as a symbolic-link
    /// swap and no SIGHUP. Default off.
    public var watchConfig = false
    /// Seconds between two looks at the watched files (`watch_interval`, default 2).
    public var watchInterval: Double = 2
    /// Where the cache snapshot is kept across restarts (`cache_file`, an absolute path); `nil`:
    /// no cache file (the default).
    public var cacheFile: String?
    /// Seconds between two writes of the cache snapshot (`cache_file_interval`): 0 (only at stop),
    /// or 1 to 3600; default 60. Under systemd the fd store's snapshot is refreshed as often.
    public var cacheFileInterval: Double = 60
    /// Whether the cache file may be on a file system that is not memory-backed
    /// (`cache_file_on_disk`, default false: tmpfs or ramfs only).
    public var cacheFileOnDisk = false
    /// The GCE metadata endpoint (`metadata_server`); `nil`: none (the default).
    public var metadataServer: MetadataServerSettings?

    /// Creates the default configuration; the socket path comes from `environment`.
    public init(environment: [String: String] = [:]) {
        socketPath = AgentDefaults.socketPath(environment: environment)
    }

    /// The refresh policy these settings describe.
    public var policy: RefreshPolicy {
        var policy = RefreshPolicy(refreshMargin: refreshMargin, minValidity: minValidity, idleTimeout: idleTimeout)
        policy.refetchGuard = refetchGuard
        policy.rejectionMemory = rejectionMemory
        return policy
    }

    /// The kinds whose provider sets `accept_wildcard`, sorted: their tokens may act for every id.
    public var wildcardKinds: [String] { providers.filter { $0.value.acceptWildcard == true }.keys.sorted() }

    /// Run the demo issuer (`"demo": true`, `--demo`): tokens for the well-known kinds, signed with a
    /// key made at start-up, which Fleet Engine refuses. Only on purpose, and never beside a
    /// provider, an issuer or `issuer_key` (``validate()``).
    public var demo = false

    /// Whether the demo issuer runs.
    public var usesDemoIssuer: Bool { demo }

    /// Whether something real is configured to serve: a provider, an issuer, an issuer key or an
    /// access token.
    public var hasTokenSource: Bool {
        !providers.isEmpty || !issuers.isEmpty || issuerKeyPath != nil || !accessTokens.isEmpty
    }

    /// Whether nothing is configured to serve: no provider, issuer, issuer key or access token,
    /// and no demo issuer. `serve` refuses such a configuration (exit 78), unless started with
    /// `--wait-for-configuration`, and a reload always refuses it.
    public var servesNothing: Bool { !demo && !hasTokenSource }

    /// What `serve` says when nothing is configured to serve.
    public static let nothingToServe =
        "nothing to serve: configure an HTTP provider (\"providers\" or --provider KIND=URL), an issuer (\"issuers\", or \"issuer_key\" / --issuer-key with a service-account key), an access token (\"access_tokens\"), or run the demo issuer on purpose (--demo or \"demo\": true; Fleet Engine refuses its tokens). See docs/CONFIG.md"

    /// Whether some issuer signs key-less, or an access token is configured (by impersonation, or
    /// the host's own), so the host's credentials are needed.
    public var needsHostCredentials: Bool {
        issuers.values.contains { $0.serviceAccount != nil } || !accessTokens.isEmpty
    }

    /// The error for a provider or issuer of the kind `access`, which names access tokens on the
    /// wire (`GET access <name>`).
    static func reservedAccessKind(key: String) -> ConfigurationError {
        ConfigurationError(
            key: key,
            "kind access is reserved: access tokens are configured under access_tokens and asked for as access <name>"
        )
    }

    /// Reads an octal file mode such as `0660`; the key is `socket_mode`.
    public static func parseMode(_ text: String) throws -> UInt32 {
        guard !text.isEmpty, text.count <= 4, let mode = UInt32(text, radix: 8), mode <= 0o777 else {
            throw ConfigurationError(key: "socket_mode", "must be an octal mode such as 0660")
        }
        return mode
    }

    /// The kinds this configuration serves: those with an HTTP provider or an issuer, each
    /// access-token entry's, and the well-known kinds when the local (or demo) issuer runs.
    public var configuredKinds: Set<String> {
        var kinds = Set(providers.keys).union(issuers.keys).union(accessTokenKinds)
        if issuerKeyPath != nil || usesDemoIssuer { kinds.formUnion(FleetEngineKinds.all) }
        return kinds
    }

    /// Checks that every kind with access rules is configured: a misspelt kind would leave the
    /// real one open.
    public func checkAccessKinds() throws {
        let kinds = configuredKinds
        if access.allow[AccessTokenKind.wireKind] != nil {
            throw ConfigurationError(
                key: "allow.\(AccessTokenKind.wireKind)",
                "access tokens carry their own rules: access_tokens.<name>.allow"
            )
        }
        for kind in access.allow.keys.sorted() where !kinds.contains(kind) {
            throw ConfigurationError(
                key: "allow.\(kind)",
                "kind \(kind) is not configured; configured: \(kinds.sorted().joined(separator: ","))"
            )
        }
        // A wildcard kind's one token acts for the whole fleet: it is served only to whom a rule
        // names, never to everyone with access to the socket.
        for kind in issuers.keys.sorted() where TokenIdentifier.wildcardKinds.contains(kind) {
            guard access.allow[kind] != nil else {
                throw ConfigurationError(
                    key: "allow.\(kind)",
                    "kind \(kind) acts for the whole fleet and needs an allow entry naming who may have it"
                )
            }
        }
    }

    /// Resolves the secret files against systemd's credentials (`LoadCredential=`): a relative
    /// `issuer_key` or `headers_file` path is looked up in `$CREDENTIALS_DIRECTORY`, and with no
    /// `issuer_key` configured, a credential named `issuer-key` is used when present.
    public func resolvingCredentials(environment: [String: String]) -> AgentConfiguration {
        guard let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty else { return self }
        func resolve(_ path: String) -> String { path.hasPrefix("/") ? path : directory + "/" + path }
        var resolved = self
        if let path = issuerKeyPath {
            resolved.issuerKeyPath = resolve(path)
        } else if FileManager.default.fileExists(atPath: directory + "/issuer-key") {
            resolved.issuerKeyPath = directory + "/issuer-key"
        }
        for (kind, settings) in providers {
            if let path = settings.headersFile { resolved.providers[kind]?.headersFile = resolve(path) }
        }
        for (kind, settings) in issuers {
            if let path = settings.keyFile { resolved.issuers[kind]?.keyFile = resolve(path) }
        }
        return resolved
    }

    /// The largest `max_lifetime` a provider may set: 30 days, seconds, the longest any reader
    /// takes (``WireToken/maxLifetimeSeconds``).
    public static let longestMaxLifetime = Double(WireToken.maxLifetimeSeconds)

    /// The log levels accepted.
    public static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// Checks `cache_file` and `cache_file_interval`; where the file may go is checked at start
    /// (`CacheFile.prepare`), with the file system.
    func validateCacheFile() throws {
        guard cacheFileInterval.isFinite,
            cacheFileInterval == 0 || (cacheFileInterval >= 1 && cacheFileInterval <= 3600)
        else {
            throw ConfigurationError(key: "cache_file_interval", "must be 0 (only at stop), or seconds from 1 to 3600")
        }
        guard let cacheFile else { return }
        let name = cacheFile.split(separator: "/").last.map(String.init) ?? ""
        guard cacheFile.hasPrefix("/"), !cacheFile.hasSuffix("/"), cacheFile.utf8.count < 4096,
            !cacheFile.utf8.contains(0), name != ".", name != ".."
        else {
            throw ConfigurationError(key: "cache_file", "must be the absolute path of a file, under 4096 bytes")
        }
        let socketDirectory = socketPath.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        let cacheDirectory = cacheFile.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        guard !socketPath.hasPrefix("/") || socketDirectory != cacheDirectory else {
            throw ConfigurationError(
                key: "cache_file",
                "must not be in the socket's directory, which workers can reach: use a directory of the agent's own"
            )
        }
    }

    /// Checks every value; throws the first problem, naming its key. `allowingNothingToServe`:
    /// a configuration that ``servesNothing`` passes (`serve --wait-for-configuration` at start).
    public func validate(allowingNothingToServe: Bool = false) throws {
        guard !socketPath.isEmpty, socketPath.utf8.count < 108 else {
            throw ConfigurationError(key: "socket", "must be a path of 1 to 107 bytes")
        }
        for (name, value) in [
            ("refresh_margin", refreshMargin), ("min_validity", minValidity), ("idle_timeout", idleTimeout),
        ] {
            guard value.isFinite, value >= 0, value <= 86_400 else {
                throw ConfigurationError(key: name, "must be seconds from 0 to 86400")
            }
        }
        for (name, value) in [("refetch_guard", refetchGuard), ("rejection_memory", rejectionMemory)] {
            guard value.isFinite, value >= 0, value <= 300 else {
                throw ConfigurationError(key: name, "must be seconds from 0 to 300")
            }
        }
        guard sharedMemoryRotation.isFinite, sharedMemoryRotation >= 1, sharedMemoryRotation <= 86_400 else {
            throw ConfigurationError(key: "shared_memory_rotation", "must be seconds from 1 to 86400")
        }
        guard sharedMemoryMaxBytes >= 1 << 20 else {
            throw ConfigurationError(key: "shared_memory_max_bytes", "must be at least 1048576 (1 MiB)")
        }
        guard issuerLifetime >= 60, issuerLifetime <= 3600 else {
            throw ConfigurationError(key: "issuer_lifetime", "must be seconds from 60 to 3600")
        }
        guard maxEntries >= 1 else { throw ConfigurationError(key: "max_entries", "must be at least 1") }
        guard (1...1024).contains(maxConcurrentFetches) else {
            throw ConfigurationError(key: "max_concurrent_fetches", "must be from 1 to 1024")
        }
        guard (1...1_000_000).contains(maxQueuedFetches) else {
            throw ConfigurationError(key: "max_queued_fetches", "must be from 1 to 1000000")
        }
        guard (1...1_000_000).contains(maxQueuedFetchesPerUID) else {
            throw ConfigurationError(key: "max_queued_fetches_per_uid", "must be from 1 to 1000000")
        }
        guard maxConnections >= 1 else { throw ConfigurationError(key: "max_connections", "must be at least 1") }
        guard maxConnectionsPerUID >= 0 else {
            throw ConfigurationError(key: "max_connections_per_uid", "must be 0 (no limit) or more")
        }
        guard requestTimeout.isFinite, requestTimeout >= 0.1, requestTimeout <= 3600 else {
            throw ConfigurationError(key: "request_timeout", "must be seconds from 0.1 to 3600")
        }
        guard stallTimeout.isFinite, stallTimeout >= 0.1, stallTimeout <= 3600 else {
            throw ConfigurationError(key: "stall_timeout", "must be seconds from 0.1 to 3600")
        }
        for kind in access.allow.keys.sorted() where !TokenIdentifier.isWellFormedKind(kind) {
            throw ConfigurationError(key: "allow.\(kind)", "kind names are 1 to 32 of a-z, 0-9 and -")
        }
        if let metricsListen { _ = try MetricsListenAddress(parsing: metricsListen) }
        guard degradedAfter.isFinite, degradedAfter >= 0, degradedAfter <= 86_400 else {
            throw ConfigurationError(key: "degraded_after", "must be seconds from 0 to 86400")
        }
        guard refresherStallAfter.isFinite, refresherStallAfter >= 2, refresherStallAfter <= 3600 else {
            throw ConfigurationError(key: "refresher_stall_after", "must be seconds from 2 to 3600")
        }
        guard metricsHeadTimeout.isFinite, metricsHeadTimeout >= 0.1, metricsHeadTimeout <= 60 else {
            throw ConfigurationError(key: "metrics_head_timeout", "must be seconds from 0.1 to 60")
        }
        guard watchInterval.isFinite, watchInterval >= 0.1, watchInterval <= 3600 else {
            throw ConfigurationError(key: "watch_interval", "must be seconds from 0.1 to 3600")
        }
        try validateCacheFile()
        guard Self.logLevels.contains(logLevel) else {
            throw ConfigurationError(key: "log_level", "must be one of \(Self.logLevels.joined(separator: ", "))")
        }
        try validateIssuers()
        try validateAccessTokens()
        _ = try metadataServerConfiguration()
        for (kind, provider) in providers {
            let key = "providers.\(kind)"
            guard TokenIdentifier.isWellFormedKind(kind) else {
                throw ConfigurationError(key: key, "kind names are 1 to 32 of a-z, 0-9 and -")
            }
            guard kind != AccessTokenKind.wireKind else { throw Self.reservedAccessKind(key: key) }
            guard !TokenIdentifier.wildcardKinds.contains(kind) else {
                throw ConfigurationError(
                    key: key,
                    "kind \(kind) acts for the whole fleet and is minted only by an issuer (issuers.\(kind))"
                )
            }
            let lower = provider.url.lowercased()
            guard lower.hasPrefix("http://") || lower.hasPrefix("https://") else {
                throw ConfigurationError(key: key + ".url", "must be an http:// or https:// URL")
            }
            guard provider.url.contains("{id}") else {
                throw ConfigurationError(key: key + ".url", "must contain {id} where the id goes")
            }
            guard Self.hasASCIIHost(provider.url) else {
                throw ConfigurationError(
                    key: key + ".url",
                    "host must be ASCII: write an internationalized name in its xn-- (punycode) form"
                )
            }
            if let value = provider.maxLifetime, !(value >= 60 && value <= Self.longestMaxLifetime) {
                throw ConfigurationError(key: key + ".max_lifetime", "must be seconds from 60 to 2592000")
            }
            for (name, value) in [("connect_timeout", provider.connectTimeout), ("timeout", provider.timeout)] {
                if let value, !(value > 0 && value <= 300) {
                    throw ConfigurationError(key: "\(key).\(name)", "must be more than 0 and at most 300 seconds")
                }
            }
        }
        // Last, so a bad value is named before what is missing.
        if demo, hasTokenSource {
            throw ConfigurationError(
                key: "demo",
                "the demo issuer runs only alone: remove --demo (\"demo\": true) or the providers, issuers, issuer_key and access_tokens"
            )
        }
        if servesNothing, !allowingNothingToServe {
            throw ConfigurationError(key: "providers", Self.nothingToServe)
        }
    }

    /// Whether the host of `url` (between `://` and the path, query or fragment, past any
    /// user-info) is ASCII: the agent does not convert an internationalized name to its `xn--`
    /// form.
    static func hasASCIIHost(_ url: String) -> Bool {
        let rest = url.utf8.firstRange(of: "://".utf8).map { url.utf8[$0.upperBound...] } ?? url.utf8[...]
        let authority = rest.prefix { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }
        let host =
            authority.lastIndex(of: UInt8(ascii: "@")).map { authority[authority.index(after: $0)...] } ?? authority
        return host.allSatisfy { $0 < 0x80 }
    }
}

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
