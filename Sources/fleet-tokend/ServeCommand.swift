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

    @OptionGroup var options: ServeOptions

    /// The config file named, if any.
    var config: String? { options.config }

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
                allowingNothingToServe: options.waitForConfiguration
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
        // Held from here to the process's end: no second agent writes the same cache file.
        let cacheLock: CacheFile.Lock?
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
                    let file = CacheFile(
                        path: path,
                        onDisk: configuration.cacheFileOnDisk,
                        socketPath: configuration.socketPath
                    )
                    try file.prepare()
                    cacheLock = try file.lock()
                } catch {
                    throw ConfigurationError(key: "cache_file", error.description)
                }
            } else {
                cacheLock = nil
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
                enabled: options.waitForConfiguration,
                configPath: config
            )
        ).run()
        withExtendedLifetime(cacheLock) {}
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

    /// Defaults, then the config file, then flags (``ServeOptions``). `allowingNothingToServe`:
    /// a configuration with nothing to serve passes (`--wait-for-configuration` at start; never
    /// on a reload).
    func resolvedConfiguration(
        environment: [String: String],
        allowingNothingToServe: Bool = false
    ) throws -> AgentConfiguration {
        try options.resolvedConfiguration(environment: environment, allowingNothingToServe: allowingNothingToServe)
    }
}
