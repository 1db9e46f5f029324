import Foundation
import TestSupport
import Testing
import TokenAgent

/// docs/CONFIG.md and the example configs against the keys the configuration parser accepts
/// (`ConfigurationFile`'s lists, derived from its coding keys): every key table both ways, the
/// reload table, every JSON snippet, and the example that claims to show every key.
@Suite("Config docs")
struct ConfigDocsTests {
    /// The section of each document that holds each key table, and the keys the parser accepts
    /// there. A key table (first column headed `Key`) in any other section fails: map it here.
    private static let keyTables: [String: [String: [String]]] = [
        "docs/CONFIG.md": [
            "Top-level keys": ConfigurationFile.topLevelKeys,
            "Provider keys": ConfigurationFile.providerKeys,
            "Issuer keys": ConfigurationFile.issuerKeys,
            "Access tokens": ConfigurationFile.accessTokenKeys,
            "Access rules": ConfigurationFile.principalListKeys,
        ],
        // The metadata endpoint's page holds its settings.
        "docs/METADATA-ENDPOINT.md": ["Settings": ConfigurationFile.metadataServerKeys],
    ]

    private let config: String

    init() throws {
        config = try DocText.read("docs/CONFIG.md")
    }

    /// `expected` once each, in any order, and nothing else.
    private func expectSame(
        _ found: [String],
        _ expected: [String],
        _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        DocText.expectSame(
            found,
            expected,
            what,
            missing: { "the parser accepts \($0), not documented" },
            unknown: { "documented \($0), the parser refuses" },
            sourceLocation: sourceLocation
        )
    }

    @Test func everyKeyTableMatchesTheParser() throws {
        for (document, tables) in Self.keyTables.sorted(by: { $0.key < $1.key }) {
            var seen: [String: Int] = [:]
            for section in DocText.sections(try DocText.read(document)) {
                for table in DocText.tables(section.lines) where table.header.first == "Key" {
                    guard let accepted = tables[section.title] else {
                        Issue.record("\(document): a key table under '\(section.title)' that this test does not check")
                        continue
                    }
                    seen[section.title, default: 0] += 1
                    let keys = table.rows.map { DocText.codeSpans($0[0]).first ?? $0[0] }
                    expectSame(keys, accepted, "\(document) '\(section.title)' table")
                }
            }
            for title in tables.keys.sorted() {
                #expect(seen[title] == 1, "\(document): one key table under '\(title)', found \(seen[title] ?? 0)")
            }
        }
    }

    @Test func theReloadTableNamesEveryTopLevelKeyOnce() throws {
        let section = try #require(DocText.section("Reload", in: config))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Applied on reload" })
        let keys = table.rows.flatMap { row in
            row.flatMap { DocText.codeSpans($0) }
        }
        expectSame(keys, ConfigurationFile.topLevelKeys, "CONFIG.md reload table")
    }

    /// The keys `fleet-tokend reload` says take effect at the next restart are the table's
    /// right-hand column.
    @Test func theStartUpColumnIsWhatAReloadSaysNeedsARestart() throws {
        let section = try #require(DocText.section("Reload", in: config))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Applied on reload" })
        let keys = table.rows.flatMap { DocText.codeSpans($0[1]) }
        expectSame(keys, ReloadChanges.startupOnlyKeys.map(\.name), "CONFIG.md reload table, start-up column")
    }

    @Test func theFlagColumnIsTheKeyWithDashes() throws {
        let section = try #require(DocText.section("Top-level keys", in: config))
        let table = try #require(DocText.tables(section).first { $0.header.first == "Key" })
        let flags = try #require(table.column("Flag"))
        for (row, flag) in zip(table.rows, flags) {
            let key = DocText.codeSpans(row[0]).first ?? row[0]
            let named = DocText.codeSpans(flag)
            if flag == "none" { continue }
            // The exceptions CONFIG.md lists: providers by `--provider KIND=URL`, and a boolean
            // with its `--no-` form.
            let expected = "--" + key.replacingOccurrences(of: "_", with: "-")
            var allowed: [String] = [expected, "--no-" + String(expected.dropFirst(2))]
            if key == "providers" { allowed.append("--provider KIND=URL") }
            #expect(!named.isEmpty && named.allSatisfy(allowed.contains), "CONFIG.md: `\(key)` has flag \(flag)")
        }
    }

    /// The example that claims to show every key, and the packaged default config.
    @Test func theExampleConfigParsesAndHoldsEveryKey() throws {
        let path = "packaging/fleet-tokend.example.json"
        let data = Data(try DocText.read(path).utf8)
        let configuration = try ConfigurationFile.parse(data, over: AgentConfiguration())
        try configuration.validate()
        try configuration.checkAccessKinds()
        let object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        expectSame(Array(object.keys), ConfigurationFile.topLevelKeys, "\(path) top level")
        let providers = try #require(object["providers"] as? [String: [String: Any]])
        #expect(!providers.isEmpty)
        expectSame(Array(Set(providers.values.flatMap(\.keys))), ConfigurationFile.providerKeys, "\(path) providers")
        let issuers = try #require(object["issuers"] as? [String: [String: Any]])
        expectSame(Array(Set(issuers.values.flatMap(\.keys))), ConfigurationFile.issuerKeys, "\(path) issuers")
        let entries = try #require(object["access_tokens"] as? [String: [String: Any]])
        expectSame(
            Array(Set(entries.values.flatMap(\.keys))),
            ConfigurationFile.accessTokenKeys,
            "\(path) access_tokens"
        )
        let metadata = try #require(object["metadata_server"] as? [String: Any])
        expectSame(Array(metadata.keys), ConfigurationFile.metadataServerKeys, "\(path) metadata_server")
        var lists = (object["allow"] as? [String: [String: Any]] ?? [:]).map(\.value)
        lists += [object["admin"] as? [String: Any] ?? [:]]
        expectSame(Array(Set(lists.flatMap(\.keys))), ConfigurationFile.principalListKeys, "\(path) allow and admin")

        // The packaged default serves nothing: plain serve exits 78 naming what to configure; the
        // packaged unit's serve --wait-for-configuration takes it, and waits.
        let packaged = Data(try DocText.read("packaging/fleet-tokend.default.json").utf8)
        let shipped = try ConfigurationFile.parse(packaged, over: AgentConfiguration())
        #expect(throws: ConfigurationError(key: "providers", AgentConfiguration.nothingToServe)) {
            try shipped.validate()
        }
        #expect(shipped.servesNothing)
        try shipped.validate(allowingNothingToServe: true)
        // It shows where the operator fills in providers and issuers.
        let keys = try #require(try JSONSerialization.jsonObject(with: packaged) as? [String: Any]).keys
        #expect(Set(keys) == ["providers", "issuers"])
    }

    /// The README's minimal configuration for a fleet host (its systemd section) serves.
    @Test func theReadmeSystemdExampleServes() throws {
        let readme = try DocText.read("README.md")
        let section = try #require(DocText.section("On a fleet host: systemd", in: readme))
        let block = try #require(
            DocText.fencedBlocks(section.joined(separator: "\n")).first { $0.language == "json" }
        )
        let configuration = try ConfigurationFile.parse(
            Data(block.lines.joined(separator: "\n").utf8),
            over: AgentConfiguration()
        )
        try configuration.validate()
        #expect(configuration.providers.keys.sorted() == ["trip", "vehicle"])
    }

    /// CONFIG.md's complete example says it is the example file: it must be the same JSON.
    @Test func configMdCompleteExampleIsTheExampleFile() throws {
        let section = try #require(DocText.section("Complete example", in: config))
        let block = try #require(
            DocText.fencedBlocks(section.joined(separator: "\n")).first { $0.language == "json" }
        )
        let shown = try JSONSerialization.jsonObject(with: Data(block.lines.joined(separator: "\n").utf8))
        let file = try JSONSerialization.jsonObject(
            with: Data(try DocText.read("packaging/fleet-tokend.example.json").utf8)
        )
        #expect(
            (shown as? NSDictionary) == (file as? NSDictionary),
            "CONFIG.md's complete example differs from the file"
        )
    }

    /// Every JSON snippet in CONFIG.md is read by the real parser: a whole file, or one provider
    /// (`"vehicle": {…}`).
    @Test func everyJSONSnippetParses() throws {
        let blocks = DocText.fencedBlocks(config).filter { $0.language == "json" }
        #expect(blocks.count >= 3)
        for block in blocks {
            var text = block.lines.joined(separator: "\n").trimmingCharacters(in: .whitespacesAndNewlines)
            if text.hasPrefix("\"") { text = #"{"providers": {"# + text + "}}" }
            do {
                var configuration = try ConfigurationFile.parse(Data(text.utf8), over: AgentConfiguration())
                // A snippet that shows other keys (access rules, say) is read as if it ran the
                // demo issuer: alone, it would have nothing to serve.
                if !configuration.hasTokenSource { configuration.demo = true }
                try configuration.validate()
            } catch {
                Issue.record("CONFIG.md line \(block.line): \(error)")
            }
        }
    }
}
