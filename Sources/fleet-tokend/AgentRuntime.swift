import ArgumentParser
import BuildInfo
import Logging
import NIOPosix
import ServiceLifecycle
import Systemd
import TokenAgent
import TokenAgentServer

/// Wires the agent together: engine, socket server, refresher, and the systemd services, run as
/// one service group that turns SIGTERM and SIGINT into a graceful shutdown.
struct AgentRuntime {
    let configuration: AgentConfiguration
    let providers: ProviderSet.Built
    let rules: AccessRules
    let load: @Sendable () throws -> AgentConfiguration
    /// The config file, watched with `watch_config`.
    let configPath: String?
    /// The watched files as they were when the starting configuration was read: the config file
    /// just before, the files it names before the providers read them.
    let watchedAtStart: WatchedFiles
    let environment: [String: String]
    /// Finds the host's credentials for key-less issuers, at start-up and at every reload.
    let discoverCredentials: ProviderSet.CredentialsDiscovery
    let logLevel: LogLevelControl
    let logger: Logger
    /// What to configure, when the agent starts on a configuration that serves nothing and waits
    /// for a reload (`serve --wait-for-configuration`); `nil`: it serves.
    var waitingForConfiguration: String? = nil

    func run() async throws {
        let notifier = SystemdNotifier()
        let passed = ListenFileDescriptors.take()
        let listeners = passed.filter { $0.name != CacheHandover.name && $0.isListeningUnixStream }
        for other in passed where other.name != CacheHandover.name && !other.isListeningUnixStream {
            logger.warning(
                "ignoring a passed descriptor that is not a listening Unix stream socket",
                metadata: ["name": "\(other.name)"]
            )
            close(other.descriptor)
        }
        logger.notice(
            "fleet-tokend starting",
            metadata: ["version": "\(BuildInfo.version)", "commit": "\(BuildInfo.commit)", "pid": "\(getpid())"]
        )
        let issuerMode = IssuerMode()
        issuerMode.set(demo: configuration.usesDemoIssuer, logger: logger)
        WildcardWarning.log(configuration, logger: logger)
        HostIdentityWarning.log(configuration, logger: logger)
        if let credentials = providers.credentials {
            logger.info("host credentials for key-less issuers", metadata: ["credentials": "\(credentials.summary)"])
        }
        for kind in providers.providers.keys.sorted() {
            logger.info(
                "kind configured",
                metadata: ["token_kind": "\(kind)", "provider": "\(providers.providers[kind]!.summary)"]
            )
        }

        var segmentLimits = SharedSegments.Limits()
        segmentLimits.maxTotalBytes = configuration.sharedMemoryMaxBytes
        segmentLimits.rotationInterval = configuration.sharedMemoryRotation
        let segments =
            configuration.sharedMemory
            ? SharedSegments(
                kinds: providers.providers.keys,
                policy: configuration.policy,
                servingFloors: providers.servingFloors,
                limits: segmentLimits,
                logger: Logger(label: "fleet-tokend.shm")
            ) : nil
        let metrics = AgentMetrics()
        let engine = TokenEngine(
            providers: providers.providers,
            policy: configuration.policy,
            maxEntries: configuration.maxEntries,
            fetchLimits: configuration.fetchLimits,
            storage: segments,
            logger: Logger(label: "fleet-tokend.engine"),
            metrics: metrics.engineMetrics
        )
        // The tokens of the previous process, before the socket listens: from the fd store when
        // systemd passed one, else from the cache file. Written back at start, every interval and
        // at stop, to every place the agent keeps them.
        let cacheFile = configuration.cacheFile.map {
            CacheFile(path: $0, onDisk: configuration.cacheFileOnDisk, socketPath: configuration.socketPath)
        }
        var destinations: [any SnapshotDestination] = cacheFile.map { [$0] } ?? []
        if notifier.isEnabled { destinations.append(FDStoreDestination(notifier: notifier)) }
        let snapshots = SnapshotStatistics(destinations: destinations.map { $0.name }, file: cacheFile?.path)
        CacheAdoption.adopt(
            fdStoreFiles: passed.filter { $0.name == CacheHandover.name },
            cacheFile: cacheFile,
            maxTokens: configuration.maxEntries,
            into: engine,
            rules: SnapshotAdoption(
                digests: providers.digests,
                acceptance: providers.acceptance,
                servingFloor: configuration.policy.servingFloor,
                servingFloors: providers.servingFloors
            ),
            notifier: notifier,
            statistics: snapshots,
            logger: logger
        )
        let reloads = ReloadStatistics()
        let access = AccessControl(rules: rules, logger: Logger(label: "fleet-tokend.access"))
        if let waitingForConfiguration {
            // Once: STATUS=, PING and every token request's error say it from now on.
            access.waitForConfiguration(waitingForConfiguration)
            logger.warning("waiting for configuration: \(waitingForConfiguration)")
        }
        let heartbeat = RefresherHeartbeat()
        let health = AgentHealth(
            settings: HealthSettings(
                degradedAfter: configuration.degradedAfter,
                refresherStallAfter: configuration.refresherStallAfter
            ),
            heartbeat: heartbeat
        )
        // READY once every configured listener listens: one that cannot stops the agent first.
        let metricsAddress = configuration.metricsListen.flatMap { try? MetricsListenAddress(parsing: $0) }
        var awaited: Set<ReadinessGate.Listener> = [.socket]
        if metricsAddress != nil { awaited.insert(.metrics) }
        if configuration.metadataServer != nil { awaited.insert(.metadata) }
        let readiness = ReadinessGate(waitingFor: awaited)
        // The GCE metadata endpoint, when configured: the access-token entries under their own
        // rules only, from the engine's cache.
        let metadata = AgentMetadataEndpoint(
            configuration: configuration,
            rules: rules,
            engine: engine,
            logger: Logger(label: "fleet-tokend.metadata"),
            onListening: { readiness.listening(.metadata) }
        )
        if metadata == nil { readiness.listening(.metadata) }
        let hostIdentity = HostIdentity(providers.credentials)
        let status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            reloads: reloads,
            access: access,
            segments: segments,
            metrics: metrics,
            health: health,
            issuerMode: issuerMode,
            snapshots: snapshots,
            metadata: metadata?.server.statistics,
            hostIdentity: hostIdentity
        )
        var serverConfiguration = SocketServerConfiguration(path: configuration.socketPath)
        serverConfiguration.maxConnections = configuration.maxConnections
        serverConfiguration.maxConnectionsPerUID = configuration.maxConnectionsPerUID
        serverConfiguration.requestTimeout = .milliseconds(Int64(configuration.requestTimeout * 1000))
        serverConfiguration.stallTimeout = .milliseconds(Int64(configuration.stallTimeout * 1000))
        serverConfiguration.mode = configuration.socketMode
        serverConfiguration.group = configuration.socketGroup
        serverConfiguration.adoptedDescriptors = listeners.map(\.descriptor)
        let server = TokenSocketServer(
            configuration: serverConfiguration,
            engine: engine,
            status: status,
            logger: Logger(label: "fleet-tokend.server"),
            onListening: { readiness.listening(.socket) }
        )
        readiness.whenReady { notifier.ready(status: status.summary()) }
        let reload = ReloadService(
            configuration: configuration,
            hostIdentity: hostIdentity,
            load: load,
            discoverCredentials: discoverCredentials,
            engine: engine,
            providers: providers,
            access: access,
            segments: segments,
            metadata: metadata,
            notifier: notifier,
            status: { status.summary() },
            statistics: reloads,
            issuerMode: issuerMode,
            logLevel: logLevel,
            logger: Logger(label: "fleet-tokend.reload")
        )
        let snapshotWriter = SnapshotWriter(
            engine: engine,
            destinations: destinations,
            digests: { reload.providerDigests },
            statistics: snapshots,
            logger: Logger(label: "fleet-tokend.cache")
        )
        var optional: [ServiceGroupConfiguration.ServiceConfiguration] = []
        if snapshotWriter.hasDestinations {
            optional.append(
                .init(
                    service: SnapshotService(writer: snapshotWriter, interval: configuration.cacheFileInterval),
                    serviceName: "cache-snapshot"
                )
            )
        }
        if let address = metricsAddress {
            var limits = MetricsHTTPServer.Limits()
            limits.headTimeout = .milliseconds(Int64(configuration.metricsHeadTimeout * 1000))
            optional.append(
                .init(
                    service: MetricsHTTPServer(
                        address: address,
                        status: status,
                        logger: Logger(label: "fleet-tokend.metrics"),
                        limits: limits,
                        onListening: { readiness.listening(.metrics) }
                    ),
                    serviceName: "metrics"
                )
            )
        }
        if let metadata {
            optional.append(.init(service: metadata.server, serviceName: "metadata-server"))
        }
        // Every service is named: ServiceGroup logs each by its name (at debug, at start and at
        // shutdown) and names it in errors, and without one it prints the service's stored
        // properties, the environment and credentials among them.
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [
                    .init(service: server, successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "socket"),
                    .init(service: RefreshScheduler(engine: engine, heartbeat: heartbeat), serviceName: "refresher"),
                    .init(
                        service: NotifyService(
                            notifier: notifier,
                            status: status,
                            heartbeat: heartbeat,
                            group: MultiThreadedEventLoopGroup.singleton,
                            socketLoopAnswers: { await server.socketLoopAnswers() },
                            logger: logger
                        ),
                        serviceName: "systemd-notify"
                    ),
                    .init(service: reload, serviceName: "reload"),
                    .init(
                        service: ConfigWatchService(
                            reload: reload,
                            configPath: configPath,
                            environment: environment,
                            started: watchedAtStart,
                            logger: Logger(label: "fleet-tokend.reload")
                        ),
                        serviceName: "config-watch"
                    ),
                ] + optional
                    + (segments.map { [.init(service: SegmentHeartbeat(segments: $0), serviceName: "shm-heartbeat")] }
                        ?? []),
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch {
            logger.critical("agent stopped", metadata: ["error": "\(error)"])
            segments?.retireAll()
            await engine.shutdown()
            await reload.credentials?.shutdown()
            throw ExitCode(1)
        }
        // The segments hold the cache's tokens: they are written out first, now that the socket
        // takes no more requests. Then readers stop using the segments and ask the next agent; no
        // token stays in them.
        snapshotWriter.write(reason: "stop")
        segments?.retireAll()
        await engine.shutdown()
        await reload.credentials?.shutdown()
        logger.info("stopped")
    }
}
