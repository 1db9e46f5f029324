import ArgumentParser
import BuildInfo

/// `fleet-tokend`: the per-host Fleet Engine token agent.
@main
struct FleetTokend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-tokend",
        abstract: "Per-host agent that caches and refreshes Fleet Engine JWTs and serves them on a Unix socket.",
        version: "fleet-tokend \(BuildInfo.description)",
        subcommands: [
            ServeCommand.self, CheckConfigCommand.self, GetCommand.self, ReloadCommand.self, StatusCommand.self,
            PingCommand.self, PrepareDirectoriesCommand.self,
        ]
    )
}
