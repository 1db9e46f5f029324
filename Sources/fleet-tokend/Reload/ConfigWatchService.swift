import Logging
import ServiceLifecycle
import TokenAgent

/// Reloads when the config file or a file it names changes (`watch_config`), for hosts without
/// systemd to send SIGHUP: Kubernetes updates a mounted ConfigMap by swapping a symbolic link,
/// about a minute after the change, and tells nobody.
///
/// Every `watch_interval` it looks at the files (``WatchedFiles``, through symbolic links) that
/// the configuration in force names; when one differs from the last look, it reloads with the
/// same rules as SIGHUP. A refused reload is tried again when a file changes again (a
/// half-written file, once complete), and also after a wait that doubles from `watch_interval`
/// (at least 2 s) to 5 minutes: the refused configuration may name a file that arrives later (a
/// Secret mounted apart from the ConfigMap), which is not watched. Whether to watch, how often
/// and what are read again from each applied configuration, so a reload can turn watching on or
/// off; a new interval takes effect after the current wait.
struct ConfigWatchService: Service {
    let reload: ReloadService
    /// The config file's path, when the agent has one.
    let configPath: String?
    let environment: [String: String]
    /// The files as they were when the starting configuration was read.
    let started: WatchedFiles
    let logger: Logger

    /// The paths `configuration` makes the watcher look at.
    func paths(_ configuration: AgentConfiguration) -> [String] {
        Self.paths(configuration, configPath: configPath, environment: environment)
    }

    /// The config file, then the files `configuration` names.
    static func paths(_ configuration: AgentConfiguration, configPath: String?, environment: [String: String])
        -> [String]
    {
        (configPath.map { [$0] } ?? []) + configuration.namedFiles(environment: environment)
    }

    func run() async throws {
        await cancelWhenGracefulShutdown { await watch() }
    }

    /// The longest wait before a refused reload is tried again without a change, seconds.
    static let longestRetry: Double = 300

    private func watch() async {
        var configuration = reload.configuration
        var last = started
        var watching = configuration.watchConfig
        // After a refused reload: when to try again even if nothing watched changes (a file the
        // refused configuration names may be one the applied one does not, so not watched), and
        // the wait after that one, doubling up to `longestRetry`.
        var retryAt: ContinuousClock.Instant?
        var retryWait: Double = 0
        if watching {
            logger.info(
                "watching the configuration files",
                metadata: ["files": "\(paths(configuration).joined(separator: ","))"]
            )
        }
        while !Task.isCancelled {
            configuration = reload.configuration
            if configuration.watchConfig != watching {
                watching = configuration.watchConfig
                logger.info(
                    watching ? "watching the configuration files" : "not watching the configuration files",
                    metadata: ["files": "\(paths(configuration).joined(separator: ","))"]
                )
                last = WatchedFiles(paths: paths(configuration))
                retryAt = nil
            }
            try? await Task.sleep(for: .seconds(configuration.watchInterval))
            guard watching, !Task.isCancelled else { continue }
            let now = WatchedFiles(paths: paths(configuration))
            let changed = now.changedPaths(since: last)
            let retrying = changed.isEmpty && retryAt.map { ContinuousClock.now >= $0 } == true
            guard !changed.isEmpty || retrying else { continue }
            if retrying {
                logger.notice("trying the refused configuration again", metadata: ["waited_s": "\(retryWait)"])
            } else {
                logger.notice("configuration files changed", metadata: ["files": "\(changed.joined(separator: ","))"])
            }
            if reload.reload(reason: retrying ? "watch-retry" : "watch") {
                retryAt = nil
                retryWait = 0
            } else {
                retryWait = min(Self.longestRetry, max(configuration.watchInterval, retryWait * 2, 2))
                retryAt = ContinuousClock.now + .milliseconds(Int64(retryWait * 1000))
            }
            // What this look saw, so a change during the reload is seen at the next; and the files
            // that only the applied configuration names (a new key file, say) as they are now.
            last = now.restricted(to: WatchedFiles(paths: paths(reload.configuration)))
        }
    }
}
