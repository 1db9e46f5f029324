import Foundation
import TestSupport
import Testing

/// The agent and the client link FoundationEssentials, never the whole of Foundation, whose
/// internationalization brings ICU and its 34 MB of data (packaging/check-footprint fails the
/// .deb and the image on it). A module of Sources/ imports Foundation only where
/// FoundationEssentials cannot be imported (the `#else` of `#if canImport(FoundationEssentials)`,
/// as the packages the agent uses do), and none imports Foundation's other parts.
@Suite("Source import rules")
struct SourceImportRulesTests {
    /// The modules of Foundation beyond FoundationEssentials.
    private static let wholeFoundation: Set<String> = [
        "Foundation", "FoundationInternationalization", "FoundationNetworking", "FoundationXML",
    ]

    /// The module an `import` line names (`import struct Foundation.Data` names Foundation), or
    /// `nil` for any other line.
    static func importedModule(_ line: Substring) -> String? {
        let access: Set<Substring> = ["public", "package", "internal", "fileprivate", "private"]
        var words = Array(line.split(separator: " ").drop { $0.hasPrefix("@") })
        if let first = words.first, access.contains(first) { words.removeFirst() }
        guard words.count >= 2, words[0] == "import" else { return nil }
        // `import struct Foundation.Data` names its module after the kind of declaration.
        let path = words.count >= 3 ? words[2] : words[1]
        return String(path.split(separator: ".").first ?? path)
    }

    /// The lines of `text` that import a module of ``wholeFoundation`` outside the `#else` of
    /// `#if canImport(FoundationEssentials)`, as `line number: text`.
    static func foundationImports(in text: String) -> [String] {
        var conditions: [(condition: Substring, inElse: Bool)] = []
        var found: [String] = []
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.drop { $0 == " " || $0 == "\t" }
            if line.hasPrefix("#if ") {
                conditions.append((line, false))
            } else if line.hasPrefix("#else") || line.hasPrefix("#elseif"), !conditions.isEmpty {
                conditions[conditions.count - 1].inElse = true
            } else if line.hasPrefix("#endif") {
                _ = conditions.popLast()
            } else if let module = importedModule(line), wholeFoundation.contains(module) {
                let allowed =
                    module == "Foundation"
                    && conditions.contains { $0.inElse && $0.condition.contains("canImport(FoundationEssentials)") }
                if !allowed { found.append("\(number + 1): \(line)") }
            }
        }
        return found
    }

    @Test func sourcesImportFoundationEssentialsOnly() throws {
        let files = try DocText.swiftFiles(under: "Sources")
        #expect(files.contains("Sources/TokenWire/RequestParser.swift"), "the walk found no sources")
        for file in files {
            let imports = Self.foundationImports(in: try DocText.read(file))
            #expect(
                imports.isEmpty,
                "\(file) imports the whole of Foundation (\(imports.joined(separator: "; "))): import FoundationEssentials (#if canImport(FoundationEssentials) … #else import Foundation #endif)"
            )
        }
    }

    @Test func theRuleSeesEveryFormOfImport() {
        let guarded =
            "#if canImport(FoundationEssentials)\n    import FoundationEssentials\n#else\n    import Foundation\n#endif\n"
        #expect(Self.foundationImports(in: guarded).isEmpty)
        #expect(Self.foundationImports(in: "import Foundation\n") == ["1: import Foundation"])
        #expect(
            Self.foundationImports(in: "import Glibc\n@preconcurrency import Foundation") == [
                "2: @preconcurrency import Foundation"
            ]
        )
        #expect(Self.foundationImports(in: "public import struct Foundation.Data").count == 1)
        #expect(Self.foundationImports(in: "#if os(Linux)\nimport FoundationNetworking\n#endif").count == 1)
        #expect(Self.foundationImports(in: "#if canImport(FoundationEssentials)\nimport Foundation\n#endif").count == 1)
        #expect(
            Self.foundationImports(in: "import FoundationEssentials\nimport TokenWire\n// import Foundation").isEmpty
        )
    }
}
