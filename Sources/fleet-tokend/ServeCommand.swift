import ArgumentParser
import Logging
import Systemd
import TokenAgent
import TokenAgentServer

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `fleet-tokend serve`: runs the agent.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the agent.",
        discussion:
            "It needs something to serve: an HTTP provider, an issuer, or, on purpose, the demo issuer (--demo), whose tokens Fleet Engine refuses. Without one it exits 78 (EX_CONFIG) naming what to configure, or, with --wait-for-configuration, waits for a reload that configures one."
    )

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
            "With nothing to serve, start anyway instead of exiting 78: answer every token request ERR unavailable naming what to configure, say so in STATUS= and the log, and serve once a reload brings something to serve (the packaged unit's, so socket activation does not start a failing agent again and again)."
    )
    var waitForConfiguration = false

    func run() async throws {
        // SIGHUP means reload (ReloadService); never let it end the process before that listens.
        signal(SIGHUP, SIG_IGN)
        // A write to a closed pipe (a log collector restarted, a client gone) fails with EPIPE
        // instead of killing the agent: no write of the agent's is worth its life.
        signal(SIGPIPE, SIG_IGN)
        let environment = ProcessInfo.processInfo.environment
        // Looked at before it is read: a change while it is read is then seen by the watcher.
        let configFileBeforeLoad = WatchedFiles(paths: config.map { [$0] } ?? [])
        let configuration: AgentConfiguration
        do {
            configuration = try resolvedConfiguration(
                environment: environment,
                allowingNothingToServe: waitForConfiguration
            )
        } catch let error as ConfigurationError {
            StandardError.write("fleet-tokend: \(error)\n")
            throw ExitCode(78)
        }
        // The files the watcher compares with: the config file as it was before it was read, and
        // the files it names before the providers read them below.
        let watchedAtStart = configFileBeforeLoad.restricted(
            to: WatchedFiles(
                paths: ConfigWatchService.paths(configuration, configPath: config, environment: environment)
            )
        )
        let logLevel = LogLevelControl(Logger.Level(rawValue: configuration.logLevel) ?? .info)
        Self.bootstrapLogging(control: logLevel)
        let logger = Logger(label: "fleet-tokend")

        let providers: ProviderSet.Built
        let rules: AccessRules
        // Looked for only when some issuer is key-less; the source logs token fingerprints only.
        let discoverCredentials: ProviderSet.CredentialsDiscovery = {
            try HostCredentials.discover(environment: environment, logger: Logger(label: "fleet-tokend.credentials"))
        }
        do {
            // NSS or LDAP may come up after the agent: a name that does not resolve yet is a warning.
            let checked = try ConfigurationCheck.check(
                configuration,
                strictNames: false,
                discoverCredentials: discoverCredentials
            )
            for warning in checked.warnings {
                logger.warning("access rule matches nobody", metadata: ["problem": "\(warning)"])
            }
            rules = checked.rules
            providers = checked.providers
            // Before anything is read from it or written to it: its directory's rules, and a
            // memory-backed file system unless the operator allowed a disk.
            if let path = configuration.cacheFile {
                do {
                    try CacheFile(path: path, onDisk: configuration.cacheFileOnDisk).prepare()
                } catch {
                    throw ConfigurationError(key: "cache_file", error.description)
                }
            }
        } catch let error as ConfigurationError {
            logger.critical("bad configuration", metadata: ["key": "\(error.key)", "reason": "\(error.reason)"])
            StandardError.write("fleet-tokend: \(error)\n")
            throw ExitCode(78)
        }
        try await AgentRuntime(
            configuration: configuration,
            providers: providers,
            rules: rules,
            // A reload with nothing to serve is refused, waiting or not: the old configuration stays.
            load: { [self] in try resolvedConfiguration(environment: environment) },
            configPath: config,
            watchedAtStart: watchedAtStart,
            environment: environment,
            discoverCredentials: discoverCredentials,
            logLevel: logLevel,
            logger: logger,
            waitingForConfiguration: ConfigurationWait.reason(
                configuration,
                enabled: waitForConfiguration,
                configPath: config
            )
        ).run()
    }

    /// Logs to the journal with structured fields when stderr is the journal, else to stderr, at
    /// the level `control` holds (a reload changes it). Either way every message and value is
    /// escaped (``LogText``), so an outside value cannot forge a line.
    static func bootstrapLogging(control: LogLevelControl) {
        let journal = JournalLogHandler.stderrIsJournal
        LoggingSystem.bootstrap { label in
            if journal {
                var handler = JournalLogHandler(label: label)
                handler.logLevel = .trace
                return control.handler(wrapping: handler)
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .trace
            return control.handler(wrapping: EscapingLogHandler(handler))
        }
    }

    /// Defaults, then the config file, then flags. `allowingNothingToServe`: a configuration with
    /// nothing to serve passes (`--wait-for-configuration` at start; never on a reload).
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
