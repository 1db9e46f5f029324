import TokenWire

/// What an applied reload changed: STATS' `reload_changes` field, which `fleet-tokend reload`
/// reads back and prints in words.
///
/// The field is comma-separated items with no spaces: `+KIND` (a kind added), `-KIND` (removed),
/// `provider:KIND` (its provider or issuer changed: its tokens were dropped), `rules:KIND` (its
/// rules changed: its segment was replaced), `policy` (refresh margin, minimum validity, idle time,
/// refetch guard or rejection memory), `log_level`, `restart:KEY` (a key only read at start-up
/// differs from the one the process started with: it takes effect at the next restart), and
/// `other` for any other setting; `none` when nothing differs. Before any applied reload the
/// field is `-`. An access-token entry (`access_tokens`) is a kind of its own, named as STATS and
/// the metrics name it, `access:NAME` (`+access:NAME`, `provider:access:NAME`, `rules:access:NAME`);
/// in words, as a request names it: `access NAME`.
public struct ReloadChanges: Equatable, Sendable {
    public var added: [String] = []
    public var removed: [String] = []
    public var providerChanged: [String] = []
    public var rulesChanged: [String] = []
    public var policy = false
    public var logLevel = false
    public var needRestart: [String] = []
    public var other = false

    /// A key a reload reads and checks but that takes effect only at start-up.
    public struct StartupKey: Sendable {
        public let name: String
        let differs: @Sendable (AgentConfiguration, AgentConfiguration) -> Bool
        /// Sets the first configuration's setting to the second's.
        let copy: @Sendable (inout AgentConfiguration, AgentConfiguration) -> Void

        init<Value: Hashable & SendableMetatype>(
            _ name: String,
            _ path: WritableKeyPath<AgentConfiguration, Value> & Sendable
        ) {
            self.name = name
            differs = { $0[keyPath: path] != $1[keyPath: path] }
            copy = { $0[keyPath: path] = $1[keyPath: path] }
        }
    }

    /// The keys only read at start-up: CONFIG.md's reload table.
    public static let startupOnlyKeys: [StartupKey] = [
        StartupKey("socket", \.socketPath), StartupKey("socket_mode", \.socketMode),
        StartupKey("socket_group", \.socketGroup), StartupKey("max_entries", \.maxEntries),
        StartupKey("max_concurrent_fetches", \.maxConcurrentFetches),
        StartupKey("max_queued_fetches", \.maxQueuedFetches),
        StartupKey("max_queued_fetches_per_uid", \.maxQueuedFetchesPerUID),
        StartupKey("max_connections", \.maxConnections), StartupKey("max_connections_per_uid", \.maxConnectionsPerUID),
        StartupKey("request_timeout", \.requestTimeout), StartupKey("stall_timeout", \.stallTimeout),
        StartupKey("shared_memory", \.sharedMemory), StartupKey("shared_memory_max_bytes", \.sharedMemoryMaxBytes),
        StartupKey("shared_memory_rotation", \.sharedMemoryRotation), StartupKey("metrics_listen", \.metricsListen),
        StartupKey("metrics_head_timeout", \.metricsHeadTimeout), StartupKey("degraded_after", \.degradedAfter),
        StartupKey("refresher_stall_after", \.refresherStallAfter), StartupKey("cache_file", \.cacheFile),
        StartupKey("cache_file_interval", \.cacheFileInterval), StartupKey("cache_file_on_disk", \.cacheFileOnDisk),
        // Its `listen` and `request_timeout`: the endpoint is bound, added or removed, and its
        // bounds set, at start-up only; its `default`, `project_id` and the entries it serves
        // apply on reload.
        StartupKey("metadata_server", \.metadataStartup),
    ]

    /// The field's value before any reload was applied.
    public static let beforeAnyReload = "-"

    /// The changes from `previous` (serving `previousKinds`) to `configuration` (serving `kinds`),
    /// given the kinds whose provider (`providerChanged`) and rules (`rulesChanged`) changed;
    /// `startup` is the configuration the process started with.
    public init(
        startup: AgentConfiguration,
        from previous: AgentConfiguration,
        previousKinds: Set<String>,
        to configuration: AgentConfiguration,
        kinds: Set<String>,
        providerChanged: Set<String>,
        rulesChanged: Set<String>
    ) {
        added = kinds.subtracting(previousKinds).sorted()
        removed = previousKinds.subtracting(kinds).sorted()
        self.providerChanged = providerChanged.intersection(kinds).intersection(previousKinds).sorted()
        self.rulesChanged = rulesChanged.intersection(kinds).intersection(previousKinds).sorted()
        policy = configuration.policy != previous.policy
        logLevel = configuration.logLevel != previous.logLevel
        let explained = !(added + removed + self.providerChanged + self.rulesChanged).isEmpty || policy || logLevel
        needRestart = Self.startupOnlyKeys.filter { $0.differs(configuration, startup) }.map(\.name)
        // Anything else that differs, start-up keys aside, when nothing above accounts for it.
        var new = configuration
        var old = previous
        for key in Self.startupOnlyKeys {
            key.copy(&new, startup)
            key.copy(&old, startup)
        }
        other = !explained && new != old
    }

    private init() {}

    private var items: [String] {
        added.map { "+" + $0 } + removed.map { "-" + $0 } + providerChanged.map { "provider:" + $0 }
            + rulesChanged.map { "rules:" + $0 } + (policy ? ["policy"] : []) + (logLevel ? ["log_level"] : [])
            + needRestart.map { "restart:" + $0 } + (other ? ["other"] : [])
    }

    /// The STATS form.
    public var field: String {
        let items = items
        return items.isEmpty ? "none" : items.joined(separator: ",")
    }

    /// The STATS form in words, for `fleet-tokend reload`; `nil` for a value it does not know
    /// (an agent of another version).
    public static func describe(field: String) -> String? {
        if field == "none" { return "nothing changed" }
        var changes = ReloadChanges()
        for item in field.split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
            guard item.count > 1 else { return nil }  // `-` (no reload yet), or an empty item
            if item.hasPrefix("+") {
                changes.added.append(String(item.dropFirst()))
            } else if item.hasPrefix("-") {
                changes.removed.append(String(item.dropFirst()))
            } else if item.hasPrefix("provider:") {
                changes.providerChanged.append(String(item.dropFirst("provider:".count)))
            } else if item.hasPrefix("rules:") {
                changes.rulesChanged.append(String(item.dropFirst("rules:".count)))
            } else if item.hasPrefix("restart:") {
                changes.needRestart.append(String(item.dropFirst("restart:".count)))
            } else if item == "policy" {
                changes.policy = true
            } else if item == "log_level" {
                changes.logLevel = true
            } else if item == "other" {
                changes.other = true
            } else {
                return nil
            }
        }
        var parts: [String] = []
        func list(_ kinds: [String], _ what: String) {
            if !kinds.isEmpty { parts.append("\(what) \(kinds.map(Self.requestName).joined(separator: ", "))") }
        }
        list(changes.added, "kinds added:")
        list(changes.removed, "kinds removed:")
        list(changes.providerChanged, "provider or issuer changed (tokens dropped):")
        list(changes.rulesChanged, "rules changed:")
        if changes.policy { parts.append("refresh policy changed") }
        if changes.logLevel { parts.append("log level changed") }
        list(changes.needRestart, "take effect at the next restart:")
        if changes.other { parts.append("other settings changed") }
        return parts.isEmpty ? nil : parts.joined(separator: "; ")
    }

    /// `kind` as a request names it: `access NAME` for an access-token entry's kind, else itself.
    private static func requestName(_ kind: String) -> String {
        AccessTokenKind.name(ofKind: kind).map { "\(AccessTokenKind.wireKind) \($0)" } ?? kind
    }
}
