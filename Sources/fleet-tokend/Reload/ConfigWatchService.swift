import Logging
import ServiceLifecycle
import TokenAgent

/// Reloads when the config file or a file it names changes (`watch_config`), for hosts without
/// systemd to send SIGHUP: Kubernetes updates a mounted ConfigMap by swapping a symbolic link,
/// about a minute after the change, and tells nobody.
///
/// Every `watch_interval` it looks at the files (``WatchedFiles``, through symbolic links) that
/// the configuration in force names; when one differs from the last look, it reloads with the
/// same rules as SIGHUP. A refused reload is not retried until a file changes again, so a
/// half-written file is picked up once it is complete. Whether to watch, how often and what are
/// read again from each applied configuration, so a reload can turn watching on or off.
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

    private func watch() async {
        var configuration = reload.configuration
        var last = started
        var watching = configuration.watchConfig
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
            }
            try? await Task.sleep(for: .seconds(configuration.watchInterval))
            guard watching, !Task.isCancelled else { continue }
            let now = WatchedFiles(paths: paths(configuration))
            let changed = now.changedPaths(since: last)
            guard !changed.isEmpty else { continue }
            logger.notice("configuration files changed", metadata: ["files": "\(changed.joined(separator: ","))"])
            reload.reload(reason: "watch")
            // What this look saw, so a change during the reload is seen at the next; and the files
            // that only the applied configuration names (a new key file, say) as they are now.
            last = now.restricted(to: WatchedFiles(paths: paths(reload.configuration)))
        }
    }
}
