import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The JSON config file: the same settings as the flags, with `_` for `-` in their names, and one
/// object per kind under `providers`. Unknown keys are refused, so a typo cannot pass silently.
public enum ConfigurationFile {
    private struct Contents: Decodable {
        var socket: String?
        var providers: [String: ProviderSettings]?
        var issuers: [String: IssuerSettings]?
        var accessTokens: [String: AccessTokenContents]?
        var allowHostIdentity: Bool?
        var iamEndpoint: String?
        var issuerKey: String?
        var issuerLifetime: Double?
        var refreshMargin: Double?
        var minValidity: Double?
        var idleTimeout: Double?
        var maxEntries: Double?
        var maxConcurrentFetches: Double?
        var maxQueuedFetches: Double?
        var maxQueuedFetchesPerUid: Double?
        var maxConnections: Double?
        var socketMode: String?
        var socketGroup: Principal?
        var logLevel: String?
        var allow: [String: PrincipalListContents]?
        var admin: PrincipalListContents?
        var requestTimeout: Double?
        var stallTimeout: Double?
        var maxConnectionsPerUid: Double?
        var refetchGuard: Double?
        var rejectionMemory: Double?
        var sharedMemory: Bool?
        var sharedMemoryMaxBytes: Double?
        var sharedMemoryRotation: Double?
        var metricsListen: String?
        var degradedAfter: Double?
        var refresherStallAfter: Double?
        var metricsHeadTimeout: Double?
        var trustRoot: Bool?
        var watchConfig: Bool?
        var watchInterval: Double?
        var demo: Bool?
        var cacheFile: String?
        var cacheFileInterval: Double?
        var cacheFileOnDisk: Bool?
        var metadataServer: MetadataServerContents?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case socket, providers, issuers, demo
            case accessTokens = "access_tokens"
            case allowHostIdentity = "allow_host_identity"
            case iamEndpoint = "iam_endpoint"
            case issuerKey = "issuer_key"
            case issuerLifetime = "issuer_lifetime"
            case refreshMargin = "refresh_margin"
            case minValidity = "min_validity"
            case idleTimeout = "idle_timeout"
            case maxEntries = "max_entries"
            case maxConcurrentFetches = "max_concurrent_fetches"
            case maxQueuedFetches = "max_queued_fetches"
            case maxQueuedFetchesPerUid = "max_queued_fetches_per_uid"
            case maxConnections = "max_connections"
            case socketMode = "socket_mode"
            case socketGroup = "socket_group"
            case logLevel = "log_level"
            case allow, admin
            case requestTimeout = "request_timeout"
            case stallTimeout = "stall_timeout"
            case maxConnectionsPerUid = "max_connections_per_uid"
            case refetchGuard = "refetch_guard"
            case rejectionMemory = "rejection_memory"
            case sharedMemory = "shared_memory"
            case sharedMemoryMaxBytes = "shared_memory_max_bytes"
            case sharedMemoryRotation = "shared_memory_rotation"
            case metricsListen = "metrics_listen"
            case degradedAfter = "degraded_after"
            case refresherStallAfter = "refresher_stall_after"
            case metricsHeadTimeout = "metrics_head_timeout"
            case trustRoot = "trust_root"
            case watchConfig = "watch_config"
            case watchInterval = "watch_interval"
            case cacheFile = "cache_file"
            case cacheFileInterval = "cache_file_interval"
            case cacheFileOnDisk = "cache_file_on_disk"
            case metadataServer = "metadata_server"
        }
    }

    /// `{"users": [...], "groups": [...]}`, each entry a name or a number.
    struct PrincipalListContents: Decodable {
        var users: [Principal]?
        var groups: [Principal]?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case users, groups
        }

        var list: PrincipalList {
            PrincipalList(users: (users ?? []).map(\.reference), groups: (groups ?? []).map(\.reference))
        }
    }

    /// One user or group: a name, or a whole number from 0 to 4294967294.
    struct Principal: Decodable {
        var reference: PrincipalReference

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let name = try? container.decode(String.self) {
                // 4294967295 is (uid_t)-1, "no change" to chown: never an id.
                guard !name.isEmpty, name.utf8.count <= 256, !name.contains(where: \.isWhitespace),
                    UInt32(name) != UInt32.max
                else {
                    throw DecodingError.dataCorruptedError(
                        in: container,
                        debugDescription: "must be a user or group name, or a number"
                    )
                }
                reference = UInt32(name).map(PrincipalReference.number) ?? .name(name)
            } else if let number = try? container.decode(Double.self), number.rounded() == number, number >= 0,
                number < 4_294_967_295
            {
                reference = .number(UInt32(number))
            } else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "must be a user or group name, or a number"
                )
            }
        }
    }

    /// The keys the file accepts at the top level; any other is refused.
    public static let topLevelKeys = Contents.CodingKeys.allCases.map(\.rawValue)

    /// The keys each entry of `providers` accepts; any other is refused.
    public static let providerKeys = ProviderSettings.CodingKeys.allCases.map(\.rawValue)

    /// The keys each entry of `issuers` accepts; any other is refused.
    public static let issuerKeys = IssuerSettings.CodingKeys.allCases.map(\.rawValue)

    /// The keys `admin` and each entry of `allow` accept; any other is refused.
    public static let principalListKeys = PrincipalListContents.CodingKeys.allCases.map(\.rawValue)

    /// Reads the file at `path` over `base` (the defaults): a regular file of at most 1 MiB
    /// (``BoundedFile/configLimit``). Throws ``ConfigurationError``.
    public static func load(path: String, over base: AgentConfiguration) throws -> AgentConfiguration {
        let bytes = try ProviderSet.readFile(path, limit: BoundedFile.configLimit, key: "config")
        return try parse(Data(bytes), over: base)
    }

    /// Parses config file contents over `base`, once and strictly (``StrictJSON``): RFC 8259 JSON
    /// only, and no name twice in any object (refused naming its dotted key, as
    /// `providers.vehicle.url`: which of two values counts would depend on the reader). Throws
    /// ``ConfigurationError``.
    public static func parse(_ data: Data, over base: AgentConfiguration) throws -> AgentConfiguration {
        let json: StrictJSON
        switch StrictJSON.parse(bytes: data) {
        case .success(let value): json = value
        case .failure(let error): throw ConfigurationError(key: "config", "not valid JSON: \(error)")
        }
        guard case .object = json else {
            throw ConfigurationError(key: "config", "must be a JSON object")
        }
        if let path = json.firstRepeatedKey() {
            throw ConfigurationError(key: StrictJSON.RepeatedKey(path: path).dotted, "appears twice")
        }
        // No name is given twice anywhere, so every object reads as one.
        guard let top = try? json.object() else {
            throw ConfigurationError(key: "config", "must be a JSON object")
        }
        try refuseUnknownKeys(top.names, allowed: topLevelKeys, path: "")
        for (path, value) in principalLists(top) {
            guard let list = try? value.object() else {
                throw ConfigurationError(key: path, "must be an object with users and groups")
            }
            try refuseUnknownKeys(list.names, allowed: principalListKeys, path: path + ".")
        }
        if let providers = try? top["providers"]?.object() {
            for member in providers.members {
                guard let settings = try? member.value.object() else { continue }
                try refuseUnknownKeys(settings.names, allowed: providerKeys, path: "providers.\(member.name).")
            }
        }
        if let issuers = try? top["issuers"]?.object() {
            for member in issuers.members {
                guard let settings = try? member.value.object() else { continue }
                try refuseUnknownKeys(settings.names, allowed: issuerKeys, path: "issuers.\(member.name).")
            }
        }
        try refuseUnknownAccessTokenKeys(top)
        try refuseUnknownMetadataServerKeys(top)
        let contents: Contents
        do {
            contents = try StrictJSONDecoder.decode(Contents.self, from: json)
        } catch let DecodingError.typeMismatch(type, context) {
            throw ConfigurationError(key: dotted(context.codingPath), "must be of type \(describe(type))")
        } catch let DecodingError.keyNotFound(key, context) {
            throw ConfigurationError(key: dotted(context.codingPath + [key]), "is required")
        } catch let DecodingError.valueNotFound(type, context) {
            throw ConfigurationError(key: dotted(context.codingPath), "must be of type \(describe(type))")
        } catch let DecodingError.dataCorrupted(context) {
            throw ConfigurationError(key: dotted(context.codingPath), context.debugDescription)
        } catch {
            throw ConfigurationError(key: "config", "cannot be read")
        }
        var configuration = base
        if let value = contents.socket { configuration.socketPath = value }
        if let value = contents.providers { configuration.providers = value }
        if let value = contents.issuers { configuration.issuers = value }
        if let value = contents.accessTokens { configuration.accessTokens = try accessTokens(value) }
        if let value = contents.allowHostIdentity { configuration.allowHostIdentity = value }
        if let value = contents.iamEndpoint { configuration.iamEndpoint = value }
        if let value = contents.issuerKey { configuration.issuerKeyPath = value }
        if let value = contents.issuerLifetime { configuration.issuerLifetime = value }
        if let value = contents.refreshMargin { configuration.refreshMargin = value }
        if let value = contents.minValidity { configuration.minValidity = value }
        if let value = contents.idleTimeout { configuration.idleTimeout = value }
        if let value = contents.maxEntries { configuration.maxEntries = try whole(value, key: "max_entries") }
        if let value = contents.maxConcurrentFetches {
            configuration.maxConcurrentFetches = try whole(value, key: "max_concurrent_fetches")
        }
        if let value = contents.maxQueuedFetches {
            configuration.maxQueuedFetches = try whole(value, key: "max_queued_fetches")
        }
        if let value = contents.maxQueuedFetchesPerUid {
            configuration.maxQueuedFetchesPerUID = try whole(value, key: "max_queued_fetches_per_uid")
        }
        if let value = contents.maxConnections {
            configuration.maxConnections = try whole(value, key: "max_connections")
        }
        if let value = contents.socketGroup { configuration.socketGroup = value.reference.description }
        if let value = contents.socketMode { configuration.socketMode = try AgentConfiguration.parseMode(value) }
        if let value = contents.logLevel { configuration.logLevel = value }
        if let value = contents.allow { configuration.access.allow = value.mapValues(\.list) }
        if let value = contents.admin { configuration.access.admin = value.list }
        if let value = contents.requestTimeout { configuration.requestTimeout = value }
        if let value = contents.stallTimeout { configuration.stallTimeout = value }
        if let value = contents.refetchGuard { configuration.refetchGuard = value }
        if let value = contents.rejectionMemory { configuration.rejectionMemory = value }
        if let value = contents.sharedMemory { configuration.sharedMemory = value }
        if let value = contents.sharedMemoryMaxBytes {
            configuration.sharedMemoryMaxBytes = try whole(value, key: "shared_memory_max_bytes")
        }
        if let value = contents.sharedMemoryRotation { configuration.sharedMemoryRotation = value }
        if let value = contents.metricsListen { configuration.metricsListen = value }
        if let value = contents.degradedAfter { configuration.degradedAfter = value }
        if let value = contents.refresherStallAfter { configuration.refresherStallAfter = value }
        if let value = contents.metricsHeadTimeout { configuration.metricsHeadTimeout = value }
        if let value = contents.trustRoot { configuration.access.trustRoot = value }
        if let value = contents.watchConfig { configuration.watchConfig = value }
        if let value = contents.demo { configuration.demo = value }
        if let value = contents.watchInterval { configuration.watchInterval = value }
        if let value = contents.cacheFile { configuration.cacheFile = value }
        if let value = contents.cacheFileInterval { configuration.cacheFileInterval = value }
        if let value = contents.cacheFileOnDisk { configuration.cacheFileOnDisk = value }
        if let value = contents.metadataServer { configuration.metadataServer = value.settings }
        if let value = contents.maxConnectionsPerUid {
            configuration.maxConnectionsPerUID = try whole(value, key: "max_connections_per_uid")
        }
        return configuration
    }

    /// The `allow.<kind>` and `admin` objects, by dotted key.
    private static func principalLists(_ top: StrictJSON.Object) -> [(String, StrictJSON)] {
        var lists: [(String, StrictJSON)] = []
        if let allow = try? top["allow"]?.object() {
            for member in allow.members.sorted(by: { $0.name < $1.name }) {
                lists.append(("allow.\(member.name)", member.value))
            }
        }
        if let admin = top["admin"] { lists.append(("admin", admin)) }
        return lists
    }

    private static func whole(_ value: Double, key: String) throws -> Int {
        guard value.rounded() == value, abs(value) < 1e15 else {
            throw ConfigurationError(key: key, "must be a whole number")
        }
        return Int(value)
    }

    static func refuseUnknownKeys(_ names: [String], allowed: [String], path: String) throws {
        for key in names.sorted() where !allowed.contains(key) {
            throw ConfigurationError(key: path + key, "is not a known key")
        }
    }

    private static func dotted(_ path: [any CodingKey]) -> String {
        path.isEmpty ? "config" : path.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
    }

    private static func describe(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: return "string"
        case is Double.Type, is Int.Type: return "number"
        case is Bool.Type: return "boolean"
        default: return "object"
        }
    }
}

// MARK: The config file's `access_tokens`: one object per entry, read as strictly as the rest.
extension ConfigurationFile {
    /// The keys each entry of `access_tokens` accepts; any other is refused.
    public static let accessTokenKeys = AccessTokenContents.CodingKeys.allCases.map(\.rawValue)

    /// One entry as the file gives it.
    struct AccessTokenContents: Decodable {
        var source: String?
        var serviceAccount: String?
        var scopes: [String]?
        var lifetime: Double?
        var delegates: [String]?
        var callsPerMinute: Double?
        var allow: PrincipalListContents?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case source
            case serviceAccount = "service_account"
            case scopes, lifetime, delegates
            case callsPerMinute = "calls_per_minute"
            case allow
        }
    }

    /// Refuses a key no entry of `access_tokens`, or no entry's `allow`, accepts.
    static func refuseUnknownAccessTokenKeys(_ top: StrictJSON.Object) throws {
        guard let entries = try? top["access_tokens"]?.object() else { return }
        for member in entries.members {
            guard let settings = try? member.value.object() else { continue }
            let path = "access_tokens.\(member.name)."
            try refuseUnknownKeys(settings.names, allowed: accessTokenKeys, path: path)
            guard let allow = settings["allow"] else { continue }
            guard let list = try? allow.object() else {
                throw ConfigurationError(key: path + "allow", "must be an object with users and groups")
            }
            try refuseUnknownKeys(list.names, allowed: principalListKeys, path: path + "allow.")
        }
    }

    /// The entries as settings; an unknown `source` is refused naming its key.
    static func accessTokens(_ entries: [String: AccessTokenContents]) throws -> [String: AccessTokenSettings] {
        var settings: [String: AccessTokenSettings] = [:]
        for (name, entry) in entries {
            var source: AccessTokenSettings.Source?
            if let text = entry.source {
                guard let known = AccessTokenSettings.Source(rawValue: text) else {
                    throw ConfigurationError(
                        key: "access_tokens.\(name).source",
                        "must be one of \(AccessTokenSettings.Source.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                source = known
            }
            var setting = AccessTokenSettings(hostAllowedTo: PrincipalList())
            setting.source = source
            setting.serviceAccount = entry.serviceAccount
            setting.scopes = entry.scopes
            setting.lifetime = entry.lifetime
            setting.delegates = entry.delegates
            setting.callsPerMinute = entry.callsPerMinute
            setting.allow = entry.allow?.list
            settings[name] = setting
        }
        return settings
    }
}

// MARK: The config file's `metadata_server`: the GCE metadata endpoint, read as strictly as the rest.
extension ConfigurationFile {
    /// The keys `metadata_server` accepts; any other is refused.
    public static let metadataServerKeys = MetadataServerContents.CodingKeys.allCases.map(\.rawValue)

    /// `metadata_server` as the file gives it: `listen` and `default` required.
    struct MetadataServerContents: Decodable {
        var listen: String
        var defaultEntry: String
        var projectID: String?
        var requestTimeout: Double?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case listen
            case defaultEntry = "default"
            case projectID = "project_id"
            case requestTimeout = "request_timeout"
        }

        var settings: MetadataServerSettings {
            var settings = MetadataServerSettings(listen: listen, defaultEntry: defaultEntry, projectID: projectID)
            if let requestTimeout { settings.requestTimeout = requestTimeout }
            return settings
        }
    }

    /// Refuses a key `metadata_server` does not accept.
    static func refuseUnknownMetadataServerKeys(_ top: StrictJSON.Object) throws {
        guard let settings = try? top["metadata_server"]?.object() else { return }
        try refuseUnknownKeys(settings.names, allowed: metadataServerKeys, path: "metadata_server.")
    }
}
