import ArgumentParser
import Logging
import TokenAgent
import TokenAgentServer
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// `fleet-tokend check-config`: checks a configuration as `serve` would at start (and a reload
/// would: ``ConfigurationCheck``), reading the files it names but starting nothing and calling
/// nothing, then prints the kinds it serves, each with its provider and who may ask for it.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Check a configuration without starting the agent, and print what it serves.",
        discussion:
            "Takes every flag serve takes, and checks the configuration serve would run with them: reads the config file and the files it names (keys, headers, credentials) and checks everything serve and a reload check, the cache file's directory as serve checks it at start (nothing is created); nothing is started and no provider or Google endpoint is called. Exit status: 0 the configuration is good (with --wait-for-configuration, also one with nothing to serve: a warning says what to configure); 78 it is not (the message names the key)."
    )

    /// Every flag `serve` takes: the configuration checked is the one `serve` would run with
    /// the same flags (without `--config`, the defaults and flags alone).
    @OptionGroup var options: ServeOptions

    @Option(help: "The agent's uid, for the cache file's checks (default: the uid running check-config).")
    var user: UInt32?

    func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let checked: ConfigurationCheck.Checked
        let configuration: AgentConfiguration
        let cacheFile: (file: CacheFile, inspection: CacheFile.Inspection)?
        do {
            configuration = try options.resolvedConfiguration(
                environment: environment,
                allowingNothingToServe: options.waitForConfiguration
            )
            checked = try ConfigurationCheck.check(
                configuration,
                strictNames: false,
                discoverCredentials: {
                    try HostCredentials.discover(environment: environment, logger: Logger(label: "fleet-tokend.check"))
                }
            )
            // As serve checks it before it reads or writes it, but creating nothing.
            if let path = configuration.cacheFile {
                let file = CacheFile(
                    path: path,
                    onDisk: configuration.cacheFileOnDisk,
                    uid: user ?? geteuid(),
                    socketPath: configuration.socketPath
                )
                do {
                    cacheFile = (file, try file.inspect(maxTokens: configuration.maxEntries))
                } catch {
                    throw ConfigurationError(key: "cache_file", error.description)
                }
            } else {
                cacheFile = nil
            }
        } catch let error as ConfigurationError {
            StandardError.write("fleet-tokend: \(TerminalText.escaped(error.description))\n")
            throw ExitCode(78)
        }
        var report = Self.report(configuration, checked, source: options.config ?? "(no config file)")
        if let waiting = ConfigurationWait.reason(
            configuration,
            enabled: options.waitForConfiguration,
            configPath: options.config
        ) {
            report += "warning: serve --wait-for-configuration would wait for configuration: "
            report += TerminalText.escaped(waiting) + "\n"
        }
        if let credentials = checked.providers.credentials {
            // What status will name: the host's credentials, never a secret (nothing is fetched).
            report += "host identity: \(TerminalText.escaped(credentials.summary))\n"
        }
        if let cacheFile { report += Self.cacheFileReport(cacheFile.file, cacheFile.inspection) }
        print(report, terminator: "")
        for provider in checked.providers.providers.values { await provider.shutdown() }
        await checked.providers.credentials?.shutdown()
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

    /// The cache file's lines: where it is, its directory and file system, and what a start
    /// would take from it (a file the start refuses is a warning: it starts cold).
    static func cacheFileReport(_ file: CacheFile, _ inspection: CacheFile.Inspection) -> String {
        let escaped = TerminalText.escaped
        var lines = ["cache file: \(escaped(file.path)) (checked for uid \(file.uid))"]
        var where_ = "  directory \(escaped(file.directory)) on \(escaped(inspection.fileSystem))"
        if !inspection.memoryBacked { where_ += ", not memory-backed: allowed by cache_file_on_disk" }
        if let missing = inspection.missingDirectory {
            where_ += "; \(escaped(missing)) does not exist yet: the agent creates it (mode 0700) at start"
        }
        lines.append(where_)
        if let holder = file.lockHolder() {
            lines.append(
                "  in use by a running agent (pid \(holder), holding \(escaped(file.lockPath))): a second agent on "
                    + "this file would be refused; stop that one first, or give this one a cache_file of its own"
            )
        }
        switch inspection.file {
        case .absent:
            lines.append("  no file yet: the agent starts cold and writes it")
        case .refused(let reason):
            lines.append("warning: the cache file \(escaped(reason)): the agent would refuse it and start cold")
        case .read(let contents):
            lines.append(
                "  holds \(contents.tokens.count) \(contents.tokens.count == 1 ? "token" : "tokens") "
                    + "(format \(contents.formatVersion), written by \(escaped(contents.agentVersion ?? "an unknown version"))); "
                    + "a start takes those with 10 s or more left whose kind's provider is unchanged"
                    + (contents.linesPastLimit > 0
                        ? "; \(contents.linesPastLimit) more lines, past max_entries, are skipped unread" : "")
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
