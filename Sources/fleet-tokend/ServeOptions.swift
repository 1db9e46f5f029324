import ArgumentParser
import TokenAgent

/// The flags that shape the agent's configuration: `serve` takes them, and `check-config` takes
/// the same ones (one group, so the two cannot drift), checking the configuration `serve` would
/// run with the same flags.
struct ServeOptions: ParsableArguments {
    @Option(help: "JSON config file (docs/CONFIG.md). Flags override its keys.")
    var config: String?

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Socket file mode, octal (default 0660).")
    var socketMode: String?

    @Option(name: .customLong("provider"), help: "HTTP provider for a kind: KIND=URL with {id} in the URL. Repeatable.")
    var providers: [String] = []

    @Flag(
        help:
            "Run the demo issuer: tokens for trying the agent, signed with a key made at start; Fleet Engine refuses them. Not with a provider or an issuer."
    )
    var demo = false

    @Option(help: "Google service-account JSON key; mints tokens for well-known kinds without a provider.")
    var issuerKey: String?

    @Option(help: "Lifetime of locally minted tokens in seconds (60 to 3600, default 3600).")
    var issuerLifetime: Double?

    @Option(help: "Seconds before expiry a background refresh aims for (default 600).")
    var refreshMargin: Double?

    @Option(help: "Default minimum validity of a served token in seconds (default 300).")
    var minValidity: Double?

    @Option(help: "Entries not read for this many seconds are not refreshed (default 600).")
    var idleTimeout: Double?

    @Option(help: "Most cache entries, shared fairly between kinds; least recently used go first (default 100000).")
    var maxEntries: Int?

    @Option(help: "Most concurrent fetches to one kind's provider (default 16).")
    var maxConcurrentFetches: Int?

    @Option(help: "Most client connections at once (default 1024).")
    var maxConnections: Int?

    @Option(help: "Most connections one uid may hold at once; 0 for no limit (default 0).")
    var maxConnectionsPerUid: Int?

    @Option(help: "Seconds a partial request line may wait for its end (default 10).")
    var requestTimeout: Double?

    @Option(help: "Seconds a client may leave its replies unread before it is disconnected (default 30).")
    var stallTimeout: Double?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (default info).")
    var logLevel: String?

    @Flag(
        inversion: .prefixedNo,
        help: "Offer tokens to workers through read-only shared memory (default on; docs/SHM.md)."
    )
    var sharedMemory: Bool?

    @Option(help: "Group that owns the socket file (default: the process's own).")
    var socketGroup: String?

    @Option(
        help:
            "Serve Prometheus metrics over HTTP at HOST:PORT, e.g. 127.0.0.1:9464 (default: off). Anyone who can reach it can read the metrics."
    )
    var metricsListen: String?

    @Option(help: "Seconds a kind's provider may fail before the agent reports degraded (default 120).")
    var degradedAfter: Double?

    @Option(help: "Seconds without a refresher pass before PING reports it stalled (default 10).")
    var refresherStallAfter: Double?

    @Option(help: "Seconds the HTTP metrics listener waits for a request's head (default 5).")
    var metricsHeadTimeout: Double?

    @Flag(
        inversion: .prefixedNo,
        help:
            "Reload when the config file or a file it names changes, as on SIGHUP (default off; for hosts without systemd, e.g. Kubernetes)."
    )
    var watchConfig: Bool?

    @Option(
        help:
            "Keep the cache in this file across restarts (an absolute path on tmpfs; default: none). Written at stop and every --cache-file-interval, adopted at start."
    )
    var cacheFile: String?

    @Option(help: "Seconds between writes of the cache file: 0 (only at stop), or 1 to 3600 (default 60).")
    var cacheFileInterval: Double?

    @Flag(
        help:
            "With nothing to serve, start anyway instead of exiting 78: answer every token request ERR unavailable naming what to configure, say so in STATUS= and the log, and serve once a reload brings something to serve (the packaged unit's, so socket activation does not start a failing agent again and again). check-config: a configuration with nothing to serve passes, with a warning."
    )
    var waitForConfiguration = false

    /// Defaults, then the config file, then flags.
    /// `allowingNothingToServe`: a configuration with nothing to serve passes
    /// (`--wait-for-configuration` at start; never on a reload).
    func resolvedConfiguration(
        environment: [String: String],
        allowingNothingToServe: Bool = false
    ) throws -> AgentConfiguration {
        var configuration = AgentConfiguration(environment: environment)
        if let config {
            configuration = try ConfigurationFile.load(path: config, over: configuration)
        }
        if let socket { configuration.socketPath = socket }
        if let socketMode { configuration.socketMode = try AgentConfiguration.parseMode(socketMode) }
        for provider in providers {
            guard let equals = provider.firstIndex(of: "="), equals != provider.startIndex else {
                throw ConfigurationError(key: "provider", "must be KIND=URL, got \(provider)")
            }
            let kind = String(provider[..<equals])
            let url = String(provider[provider.index(after: equals)...])
            var settings = configuration.providers[kind] ?? ProviderSettings(url: url)
            settings.url = url
            configuration.providers[kind] = settings
        }
        if let issuerKey { configuration.issuerKeyPath = issuerKey }
        if demo { configuration.demo = true }
        if let issuerLifetime { configuration.issuerLifetime = issuerLifetime }
        if let refreshMargin { configuration.refreshMargin = refreshMargin }
        if let minValidity { configuration.minValidity = minValidity }
        if let idleTimeout { configuration.idleTimeout = idleTimeout }
        if let maxEntries { configuration.maxEntries = maxEntries }
        if let maxConcurrentFetches { configuration.maxConcurrentFetches = maxConcurrentFetches }
        if let maxConnections { configuration.maxConnections = maxConnections }
        if let maxConnectionsPerUid { configuration.maxConnectionsPerUID = maxConnectionsPerUid }
        if let requestTimeout { configuration.requestTimeout = requestTimeout }
        if let stallTimeout { configuration.stallTimeout = stallTimeout }
        if let logLevel { configuration.logLevel = logLevel }
        if let socketGroup { configuration.socketGroup = socketGroup }
        if let sharedMemory { configuration.sharedMemory = sharedMemory }
        if let metricsListen { configuration.metricsListen = metricsListen }
        if let degradedAfter { configuration.degradedAfter = degradedAfter }
        if let refresherStallAfter { configuration.refresherStallAfter = refresherStallAfter }
        if let metricsHeadTimeout { configuration.metricsHeadTimeout = metricsHeadTimeout }
        if let watchConfig { configuration.watchConfig = watchConfig }
        if let cacheFile { configuration.cacheFile = cacheFile }
        if let cacheFileInterval { configuration.cacheFileInterval = cacheFileInterval }
        configuration = configuration.resolvingCredentials(environment: environment)
        try configuration.validate(allowingNothingToServe: allowingNothingToServe)
        return configuration
    }
}
