import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import TokenAgent
import TokenAgentServer

/// `fleet-tokend serve`: runs the agent.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the agent. With no provider and no key it runs a demo issuer."
    )

    @Option(help: "JSON config file (docs/CONFIG.md). Flags override its keys.")
    var config: String?

    @Option(help: "Unix socket path (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock).")
    var socket: String?

    @Option(help: "Socket file mode, octal (default 0660).")
    var socketMode: String?

    @Option(name: .customLong("provider"), help: "HTTP provider for a kind: KIND=URL with {id} in the URL. Repeatable.")
    var providers: [String] = []

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

    @Option(help: "Most cache entries; least recently used go first (default 100000).")
    var maxEntries: Int?

    @Option(help: "Most concurrent fetches to providers (default 16).")
    var maxConcurrentFetches: Int?

    @Option(help: "Most client connections at once (default 1024).")
    var maxConnections: Int?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical (default info).")
    var logLevel: String?

    func run() async throws {
        let configuration: AgentConfiguration
        do {
            configuration = try resolvedConfiguration()
            try configuration.validate()
        } catch let error as ConfigurationError {
            FileHandle.standardError.write(Data("fleet-tokend: \(error)\n".utf8))
            throw ExitCode(78)
        }
        let level = Logger.Level(rawValue: configuration.logLevel) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "fleet-tokend")

        let providers: [String: any TokenProvider]
        do {
            providers = try ProviderSet.make(from: configuration)
        } catch let error as ConfigurationError {
            logger.critical("bad configuration", metadata: ["key": "\(error.key)", "reason": "\(error.reason)"])
            FileHandle.standardError.write(Data("fleet-tokend: \(error)\n".utf8))
            throw ExitCode(78)
        }
        if configuration.usesDemoIssuer {
            logger.warning(
                "DEMO ISSUER: no provider and no issuer key configured. Tokens are signed with a throw-away RSA key made at start-up; they are for trying the agent only and Fleet Engine will reject them."
            )
        }
        for kind in providers.keys.sorted() {
            logger.info(
                "kind configured",
                metadata: ["token_kind": "\(kind)", "provider": "\(providers[kind]!.summary)"]
            )
        }

        let engine = TokenEngine(
            providers: providers,
            policy: configuration.policy,
            maxEntries: configuration.maxEntries,
            maxConcurrentFetches: configuration.maxConcurrentFetches,
            logger: Logger(label: "fleet-tokend.engine")
        )
        let status = AgentStatus(engine: engine, server: ServerStatistics())
        var serverConfiguration = SocketServerConfiguration(path: configuration.socketPath)
        serverConfiguration.maxConnections = configuration.maxConnections
        serverConfiguration.mode = configuration.socketMode
        let server = TokenSocketServer(
            configuration: serverConfiguration,
            engine: engine,
            status: status,
            logger: Logger(label: "fleet-tokend.server")
        )
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    .init(service: server, successTerminationBehavior: .gracefullyShutdownGroup),
                    .init(service: RefreshScheduler(engine: engine)),
                ],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch {
            logger.critical("agent stopped", metadata: ["error": "\(error)"])
            await engine.shutdown()
            throw ExitCode(1)
        }
        await engine.shutdown()
        logger.info("stopped")
    }

    /// Defaults, then the config file, then flags.
    private func resolvedConfiguration() throws -> AgentConfiguration {
        var configuration = AgentConfiguration(environment: ProcessInfo.processInfo.environment)
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
        if let issuerLifetime { configuration.issuerLifetime = issuerLifetime }
        if let refreshMargin { configuration.refreshMargin = refreshMargin }
        if let minValidity { configuration.minValidity = minValidity }
        if let idleTimeout { configuration.idleTimeout = idleTimeout }
        if let maxEntries { configuration.maxEntries = maxEntries }
        if let maxConcurrentFetches { configuration.maxConcurrentFetches = maxConcurrentFetches }
        if let maxConnections { configuration.maxConnections = maxConnections }
        if let logLevel { configuration.logLevel = logLevel }
        return configuration
    }
}
