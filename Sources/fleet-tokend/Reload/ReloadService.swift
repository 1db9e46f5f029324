import Logging
import ServiceLifecycle
import Synchronization
import Systemd
import TokenAgent
import TokenAgentServer
import UnixSignals

/// Reloads on SIGHUP (and when ``ConfigWatchService`` sees a watched file change): re-reads the
/// config file and the header and key files, keeps the cached tokens of kinds whose provider did
/// not change, and refuses a broken configuration with a log line, keeping the old one. Tells
/// systemd `RELOADING=1` … `READY=1` around it. One reload runs at a time.
final class ReloadService: Service, Sendable {
    private let load: @Sendable () throws -> AgentConfiguration
    private let discoverCredentials: ProviderSet.CredentialsDiscovery
    private let hostIdentity: HostIdentity
    private let engine: TokenEngine
    private let current: Mutex<ProviderSet.Built>
    private let access: AccessControl
    private let segments: SharedSegments?
    private let metadata: AgentMetadataEndpoint?
    private let notifier: SystemdNotifier
    private let status: @Sendable () -> String
    private let statistics: ReloadStatistics
    private let issuerMode: IssuerMode
    private let logLevel: LogLevelControl
    private let logger: Logger
    /// The configuration in force: the starting one, then each one a reload applied.
    private let applied: Mutex<AgentConfiguration>
    /// The configuration the process started with: the keys only read at start-up come from it.
    private let startup: AgentConfiguration
    /// Held for the whole of a reload, so a signal and the watcher never reload at once.
    private let serial = Mutex(())

    init(
        configuration: AgentConfiguration,
        hostIdentity: HostIdentity = HostIdentity(nil),
        load: @escaping @Sendable () throws -> AgentConfiguration,
        discoverCredentials: @escaping ProviderSet.CredentialsDiscovery,
        engine: TokenEngine,
        providers: ProviderSet.Built,
        access: AccessControl,
        segments: SharedSegments? = nil,
        metadata: AgentMetadataEndpoint? = nil,
        notifier: SystemdNotifier,
        status: @escaping @Sendable () -> String,
        statistics: ReloadStatistics,
        issuerMode: IssuerMode = IssuerMode(),
        logLevel: LogLevelControl,
        logger: Logger
    ) {
        self.issuerMode = issuerMode
        self.applied = Mutex(configuration)
        self.startup = configuration
        self.logLevel = logLevel
        self.statistics = statistics
        self.load = load
        self.discoverCredentials = discoverCredentials
        self.hostIdentity = hostIdentity
        self.engine = engine
        self.current = Mutex(providers)
        self.access = access
        self.segments = segments
        self.metadata = metadata
        self.notifier = notifier
        self.status = status
        self.logger = logger
    }

    /// The digest of each kind's provider in force (for the cache hand-over).
    var providerDigests: [String: String] { current.withLock { $0.digests } }

    /// The configuration in force.
    var configuration: AgentConfiguration { applied.withLock { $0 } }

    /// The host's credentials in force, which key-less issuers share.
    var credentials: (any AccessTokenSource)? { current.withLock { $0.credentials } }

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        await cancelWhenGracefulShutdown {
            for await _ in signals {
                self.reload()
            }
        }
    }

    /// One reload, for SIGHUP (`systemctl reload`) and the config watcher; `reason` is logged.
    /// - Returns: whether the new configuration was applied.
    @discardableResult
    func reload(reason: String = "SIGHUP") -> Bool {
        serial.withLock { _ in reloadOnce(reason: reason) }
    }

    private func reloadOnce(reason: String) -> Bool {
        notifier.reloading()
        defer { notifier.ready(status: status()) }
        do {
            let configuration = try load()  // resolved and validated as at start-up
            let previous = current.withLock { $0 }
            // On a reload every name must resolve: a typo must not silently lock users out.
            let checked = try ConfigurationCheck.check(
                configuration,
                strictNames: true,
                reusing: previous,
                discoverCredentials: discoverCredentials
            )
            let rules = checked.rules
            let built = checked.providers
            let changed = built.changedKinds(since: previous)
            let rulesChanged = access.current.kindsWithChangedRules(to: rules, kinds: Set(built.providers.keys))
            // A kind whose rules changed gets a new segment, withheld until the new rules are in
            // force: its readers must ask, and be checked, again; the old one is retired and wiped.
            // The rules, which know the new kinds, come before the engine (see Reconfiguration).
            Reconfiguration.apply(
                rules: rules,
                providers: built.providers,
                policy: configuration.policy,
                changedKinds: changed,
                rulesChanged: rulesChanged,
                engine: engine,
                access: access,
                segments: segments
            )
            // The metadata endpoint's entries and their own rules, after the engine has the kinds.
            metadata?.apply(configuration, rules: rules)
            // A configuration a reload applies has something to serve (``load`` refuses one that
            // has not): an agent that waited for one serves from now on.
            let waited = access.waitingForConfiguration != nil
            access.waitForConfiguration(nil)
            if let level = Logger.Level(rawValue: configuration.logLevel) { logLevel.set(level) }
            let changes = ReloadChanges(
                startup: startup,
                from: applied.withLock { $0 },
                previousKinds: Set(previous.providers.keys),
                to: configuration,
                kinds: Set(built.providers.keys),
                providerChanged: changed,
                rulesChanged: rulesChanged
            )
            current.withLock { $0 = built }
            hostIdentity.set(built.credentials)
            applied.withLock { $0 = configuration }
            if let old = previous.credentials, built.credentials.map({ $0 as AnyObject }) !== (old as AnyObject) {
                // The old source's last users are the retired signers' fetches, cancelled by the
                // reload: give them a moment to end before its connections close.
                Task {
                    try? await Task.sleep(for: .seconds(15))
                    await old.shutdown()
                }
            }
            statistics.recordApplied(changes: changes.field)
            issuerMode.set(demo: configuration.usesDemoIssuer, logger: logger)
            WildcardWarning.log(configuration, logger: logger)
            HostIdentityWarning.log(configuration, logger: logger)
            logger.notice(
                "configuration reloaded",
                metadata: [
                    "reason": "\(reason)",
                    "kinds": "\(built.providers.keys.sorted().joined(separator: ","))",
                    "changed_kinds": "\(changed.sorted().joined(separator: ","))",
                    "changes": "\(changes.field)",
                    "log_level": "\(configuration.logLevel)",
                ]
            )
            if waited { logger.notice("no longer waiting for configuration: serving") }
            return true
        } catch {
            statistics.recordRefused(reason: "\(error)")
            logger.error(
                "reload refused; the old configuration stays",
                metadata: ["reason": "\(reason)", "error": "\(error)"]
            )
            return false
        }
    }
}
