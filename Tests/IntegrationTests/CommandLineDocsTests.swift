import Foundation
import TestSupport
import Testing

/// The options the built `fleet-tokend` prints in each subcommand's `--help`, against the man
/// page's synopsis and CONFIG.md's flag column, both ways.
@Suite("Command-line docs")
struct CommandLineDocsTests {
    /// The `--options` one `--help` text lists (from its OPTIONS section), without `--help`.
    static func options(inHelp text: String) -> Set<String> {
        var options: Set<String> = []
        var inOptions = false
        for line in text.components(separatedBy: "\n") {
            if line.hasSuffix(":"), !line.hasPrefix(" ") {
                inOptions = line == "OPTIONS:"
                continue
            }
            guard inOptions, line.hasPrefix("  "), !line.hasPrefix("   ") else { continue }
            // The name column ends at the first run of two spaces.
            let column = line.dropFirst(2).components(separatedBy: "  ").first ?? ""
            for word in column.split(whereSeparator: { $0 == " " || $0 == "/" || $0 == "," })
            where word.hasPrefix("--") {
                options.insert(String(word))
            }
        }
        // ArgumentParser's own: every command takes them (`--version` from the root's version).
        options.remove("--help")
        options.remove("--version")
        return options
    }

    static func help(_ arguments: [String]) async throws -> String {
        let result = try await run(AgentProcess.binary, arguments + ["--help"])
        try #require(result.status == 0, "fleet-tokend \(arguments) --help: \(result.stderr)")
        return result.stdout
    }

    /// The subcommands `fleet-tokend --help` lists.
    static func subcommands() async throws -> [String] {
        var names: [String] = []
        var inList = false
        for line in try await help([]).components(separatedBy: "\n") {
            if line.hasSuffix(":"), !line.hasPrefix(" ") {
                inList = line == "SUBCOMMANDS:"
                continue
            }
            // The list ends at its first blank line (a "See 'fleet-tokend help …'" note follows).
            if line.trimmingCharacters(in: .whitespaces).isEmpty { inList = false }
            if inList, line.hasPrefix("  "), !line.hasPrefix("   "), let name = line.split(separator: " ").first {
                names.append(String(name))
            }
        }
        return names
    }

    @Test func theManPageSynopsisHasEveryCommandAndOption() async throws {
        let page = try DocText.read("packaging/man/fleet-tokend.8")
        let lines = page.components(separatedBy: "\n")
        let start = try #require(lines.firstIndex(of: ".SH SYNOPSIS"))
        let synopsis = lines[(start + 1)...].prefix { !$0.hasPrefix(".SH ") }
        // One synopsis per command: from `.B fleet-tokend <command>` to the next.
        var documented: [String: Set<String>] = [:]
        var command: String?
        for line in synopsis.map(DocText.unroff) {
            if line.hasPrefix(".B fleet-tokend ") {
                command = String(line.dropFirst(".B fleet-tokend ".count))
                documented[command ?? "", default: []] = []
                continue
            }
            guard let command else { continue }
            for word in line.split(whereSeparator: { " \"[]|".contains($0) }) where word.hasPrefix("--") {
                documented[command, default: []].insert(String(word))
            }
        }
        let commands = try await Self.subcommands()
        #expect(Set(documented.keys) == Set(commands), "man page synopsis commands")
        for command in commands {
            let options = Self.options(inHelp: try await Self.help([command]))
            #expect(!options.isEmpty)
            let missing = options.subtracting(documented[command] ?? []).sorted()
            let unknown = (documented[command] ?? []).subtracting(options).sorted()
            #expect(missing.isEmpty, "man page synopsis of \(command) lacks \(missing)")
            #expect(unknown.isEmpty, "man page synopsis of \(command) has \(unknown), which it does not take")
        }
    }

    /// Every flag CONFIG.md names for a key is an option of `serve`, and every option of `serve`
    /// but `--config` and `--wait-for-configuration` (how the packaged unit starts on a config
    /// that serves nothing, no key: CONFIG.md's Kinds) sets a key CONFIG.md names it for.
    @Test func configMdFlagsAreServesOptions() async throws {
        let config = try DocText.read("docs/CONFIG.md")
        let section = try #require(DocText.section("Top-level keys", in: config))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Key" })
        let flags = Set(
            try #require(table.column("Flag")).flatMap(DocText.codeSpans).compactMap {
                $0.split(separator: " ").first.map(String.init)
            }
        )
        let options = Self.options(inHelp: try await Self.help(["serve"]))
        #expect(
            flags.subtracting(options).isEmpty,
            "CONFIG.md flags serve does not take: \(flags.subtracting(options))"
        )
        let unnamed = options.subtracting(flags).subtracting(["--config", "--wait-for-configuration"])
        #expect(unnamed.isEmpty, "serve options with no key in CONFIG.md: \(unnamed.sorted())")
    }
}
