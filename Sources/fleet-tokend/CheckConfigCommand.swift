import ArgumentParser
import Logging
import TokenAgent
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// `fleet-tokend check-config`: checks a configuration as `serve` would at start (and a reload
/// would: ``ConfigurationCheck``), reading the files it names but starting nothing and calling
/// nothing, then prints the kinds it serves, each with its provider and who may ask for it.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Check a configuration without starting the agent, and print what it serves.",
        discussion:
            "Reads the config file and the files it names (keys, headers, credentials) and checks everything serve and a reload check; nothing is started and no provider or Google endpoint is called. Exit status: 0 the configuration is good; 78 it is not (the message names the key)."
    )

    @Option(help: "JSON config file (docs/CONFIG.md); without it, the defaults and flags alone.")
    var config: String?

    @Flag(help: "Check it as serve --demo would.")
    var demo = false

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        var arguments = config.map { ["--config", $0] } ?? []
        if demo { arguments.append("--demo") }
        let checked: ConfigurationCheck.Checked
        let configuration: AgentConfiguration
        do {
            configuration = try ServeCommand.parse(arguments).resolvedConfiguration(environment: environment)
            checked = try ConfigurationCheck.check(
                configuration,
                strictNames: false,
                discoverCredentials: {
                    try HostCredentials.discover(environment: environment, logger: Logger(label: "fleet-tokend.check"))
                }
            )
        } catch let error as ConfigurationError {
            StandardError.write("fleet-tokend: \(TerminalText.escaped(error.description))\n")
            throw ExitCode(78)
        }
        print(Self.report(configuration, checked, source: config ?? "(no config file)"), terminator: "")
        for provider in checked.providers.providers.values { await provider.shutdown() }
    }

    /// What the configuration serves: one line a kind, its provider and who may ask for it.
    static func report(_ configuration: AgentConfiguration, _ checked: ConfigurationCheck.Checked, source: String)
        -> String
    {
        var lines = ["configuration OK: \(TerminalText.escaped(source))"]
        if configuration.usesDemoIssuer {
            lines.append("demo issuer: Fleet Engine refuses its tokens")
        }
        for warning in checked.warnings { lines.append("warning: \(TerminalText.escaped(warning))") }
        lines.append("kinds:")
        let providers = checked.providers.providers
        let rules = configuration.accessRules
        for kind in providers.keys.sorted() {
            let who: String
            if let list = rules.allow[kind] {
                let users = list.users.map(\.description).joined(separator: ",")
                let groups = list.groups.map(\.description).joined(separator: ",")
                who = "allowed: users [\(users)] groups [\(groups)]"
            } else {
                who = "allowed: any peer that can open the socket"
            }
            // An access token as a request names it: `access <name>`.
            let named = AccessTokenKind.name(ofKind: kind).map { "\(AccessTokenKind.wireKind) \($0)" } ?? kind
            lines.append(
                "  \(TerminalText.padded(named, to: max(18, named.utf16.count + 1)))\(TerminalText.escaped(providers[kind]!.summary)); \(TerminalText.escaped(who))"
            )
        }
        if let admin = configuration.access.admin {
            let users = admin.users.map(\.description).joined(separator: ",")
            let groups = admin.groups.map(\.description).joined(separator: ",")
            lines.append("admin:     users [\(TerminalText.escaped(users))] groups [\(TerminalText.escaped(groups))]")
        }
        if let metadata = configuration.metadataServer {
            // The entries it serves, each to its own allow only (no exemption for root or the
            // agent's uid), and what `default/` and `project/project-id` answer.
            let served = configuration.accessTokens.filter { $0.value.source != .host }.keys.sorted()
            let project = metadata.projectID.map { "project \($0)" } ?? "project from the default's account"
            lines.append(
                TerminalText.escaped(
                    "metadata server: \(metadata.listen) default \(metadata.defaultEntry), \(project); serves "
                        + "\(served.joined(separator: ",")), each to its own allow only"
                )
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
