import Foundation
import TestSupport
import Testing

/// The standing rules that keep the documents readable in one sitting (issue 33 §6): DESIGN.md
/// gives the whole design in at most 500 lines and BENCHMARKS.md its figures in at most 350, no
/// document in docs/ runs past 700 (a deep dive moves to a focused document instead), BENCHMARKS.md
/// opens with its headline figures, and the operations runbooks open with their tasks.
@Suite("Doc size rules")
struct DocSizeRulesTests {
    /// The documents with a limit of their own, in lines.
    private static let limits = ["docs/DESIGN.md": 500, "docs/BENCHMARKS.md": 350]
    /// The limit of every other document in docs/.
    private static let anyDocument = 700

    /// A document's lines before its first section of level 2 or deeper: its title and opening.
    private static func opening(_ text: String) -> [String] {
        let sections = DocText.sections(text)
        return sections.prefix { $0.level < 2 }.flatMap(\.lines)
    }

    @Test func designAndBenchmarksStayWithinTheirLimits() throws {
        for (document, limit) in Self.limits.sorted(by: { $0.key < $1.key }) {
            let lines = DocText.lineCount(try DocText.read(document))
            #expect(
                lines <= limit,
                "\(document) has \(lines) lines, over \(limit): move a deep dive to a focused document"
            )
        }
    }

    @Test func noDocumentInDocsIsOver700Lines() throws {
        let documents = try DocText.docs()
        for document in ["DESIGN", "OPERATIONS", "BENCHMARKS", "PROTOCOL", "CONFIG"] {
            #expect(documents.contains("docs/\(document).md"), "docs/ lists no \(document).md")
        }
        for document in documents {
            let lines = DocText.lineCount(try DocText.read(document))
            #expect(
                lines <= Self.anyDocument,
                "\(document) has \(lines) lines, over \(Self.anyDocument): split it by topic"
            )
        }
    }

    /// BENCHMARKS.md opens with the one command that measures every row, then the headline
    /// figures: its first section, with the commit they were measured on and their table.
    @Test func benchmarksOpensWithItsHeadlineFigures() throws {
        let text = try DocText.read("docs/BENCHMARKS.md")
        let sections = DocText.sections(text)
        let opening = Self.opening(text).joined(separator: "\n")
        #expect(opening.contains("bash Benchmarks/report.sh"), "BENCHMARKS.md does not open with its command")
        let first = try #require(sections.first { $0.level == 2 })
        #expect(first.title == "Headline figures", "BENCHMARKS.md's first section is \(first.title)")
        #expect(first.lines.contains { $0.hasPrefix("Commit `") }, "the headline figures name no commit")
        let table = try #require(DocText.tables(first.lines).first, "the headline figures have no table")
        #expect(table.header == ["row", "figure", "compared with"])
        #expect(!table.rows.isEmpty)
    }

    /// Each operations runbook opens, before its first section, with a list of the tasks an
    /// operator does there, each linking to a section of the runbook; OPERATIONS.md, the entry
    /// point, links to both and keeps the troubleshooting table.
    @Test func operationsRunbooksOpenWithTheirTasks() throws {
        for runbook in ["docs/OPERATIONS-SYSTEMD.md", "docs/OPERATIONS-KUBERNETES.md"] {
            let text = try DocText.read(runbook)
            let opening = Self.opening(text)
            let tasks = opening.filter { $0.hasPrefix("- ") && $0.contains("](#") }
            #expect(tasks.count >= 5, "\(runbook) does not open with its task list")
            let anchors = DocText.anchors(text)
            for link in try DocText.links(opening.joined(separator: "\n")) where link.target.hasPrefix("#") {
                #expect(anchors.contains(String(link.target.dropFirst())), "\(runbook): no section \(link.target)")
            }
        }
        let entry = try DocText.read("docs/OPERATIONS.md")
        let targets = try DocText.links(entry).map(\.target)
        #expect(targets.contains("OPERATIONS-SYSTEMD.md"), "OPERATIONS.md does not lead to the systemd runbook")
        #expect(targets.contains("OPERATIONS-KUBERNETES.md"), "OPERATIONS.md does not lead to the Kubernetes one")
        let troubleshooting = try #require(DocText.section("Troubleshooting", in: entry), "no Troubleshooting")
        #expect(!DocText.tables(troubleshooting).isEmpty, "OPERATIONS.md's Troubleshooting has no table")
    }
}
