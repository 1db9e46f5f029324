import Foundation
import TestSupport
import Testing

/// The standing rules that keep the documents readable (issue 48 §2). They replace issue 33 §6's
/// line caps, which were met by squeezing (longer lines, table cells of 1,000 characters and more)
/// rather than by simplifying:
///
/// - **DESIGN.md tells the whole design in at most 3,500 words.** A word is a run of characters
///   other than white space that holds a letter or a digit (`wc -w`'s words less marks such as
///   Markdown's `|`, `-` and `#`), counted on every line outside fenced code blocks: prose, headings, lists
///   and table cells all count, since a reader reads them all; fenced code blocks (the data-flow
///   diagram, the formulas) do not. A deep dive goes to a focused document (CACHE, FETCHING,
///   CONNECTIONS, LIFECYCLE, SHM, ...), and types to DocC.
/// - **DESIGN.md's prose is wrapped at 100 columns**: every line outside fenced code blocks and
///   tables, headings included, has at most 100 characters (not bytes).
/// - **No table cell over 300 characters in DESIGN.md or README.md**, counted as written (a link's
///   target included): what needs more is prose, or a focused document.
/// - **Every other document in docs/ keeps a size cap, in words**: at most 10,000, counted as
///   DESIGN's are, and BENCHMARKS.md at most 3,500 (its figures read at a glance). This restates
///   the old 700- and 350-line caps so that longer lines or wider cells cannot meet them. The cell
///   rule is not applied there: the reference tables of CONFIG, PROTOCOL, the operations runbooks,
///   METADATA-ENDPOINT and RELIABILITY hold cells of up to 1,127 characters, one key or fault per
///   row, which read as a reference, not in one sitting.
/// - README.md opens with one sentence of what the agent is, then its two commands; BENCHMARKS.md
///   opens with its headline figures, and the operations runbooks with their tasks.
///
/// The rules' own counters are checked on made-up documents first, so each rule is seen to fail.
@Suite("Doc size rules")
struct DocSizeRulesTests {
    /// The most words DESIGN.md may have.
    static let designWords = 3_500
    /// The widest line of DESIGN.md's prose.
    static let designColumns = 100
    /// The longest table cell of DESIGN.md and README.md.
    static let cellCharacters = 300
    /// The documents in docs/ with a word cap of their own; every other has `anyDocumentWords`.
    static let wordCaps = ["docs/DESIGN.md": designWords, "docs/BENCHMARKS.md": 3_500]
    /// The word cap of every other document in docs/.
    static let anyDocumentWords = 10_000

    /// A line outside fenced code blocks: its 1-based number, its text, and whether it is a
    /// table row (a line that starts with `|`).
    struct ReadLine {
        var number: Int
        var text: String
        var inTable: Bool
    }

    /// The lines of `text` outside fenced code blocks (the fences themselves left out too).
    static func linesOutsideCode(_ text: String) -> [ReadLine] {
        var lines: [ReadLine] = []
        var fence: String?
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if let open = fence {
                if trimmed.hasPrefix(open), trimmed.allSatisfy({ $0 == open.first }) { fence = nil }
                continue
            }
            if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                fence = String(trimmed.prefix(while: { $0 == trimmed.first }))
                continue
            }
            lines.append(ReadLine(number: index + 1, text: line, inTable: trimmed.hasPrefix("|")))
        }
        return lines
    }

    /// The words of `text` outside fenced code blocks: runs of characters other than white space
    /// that hold a letter or a digit.
    static func words(_ text: String) -> Int {
        var count = 0
        for line in linesOutsideCode(text) {
            let runs = line.text.split(whereSeparator: \.isWhitespace)
            count += runs.filter { $0.contains { $0.isLetter || $0.isNumber } }.count
        }
        return count
    }

    /// The lines of prose (outside fenced code blocks and tables) wider than `columns` characters.
    static func wideProseLines(_ text: String, columns: Int) -> [ReadLine] {
        linesOutsideCode(text).filter { !$0.inTable && $0.text.count > columns }
    }

    /// The cells of every table of `text`, header cells included, longer than `characters`.
    static func longCells(_ text: String, characters: Int) -> [String] {
        DocText.tables(text.components(separatedBy: "\n")).flatMap { [$0.header] + $0.rows }.flatMap { $0 }
            .filter { $0.count > characters }
    }

    /// A document's lines before its first section of level 2 or deeper: its title and opening.
    private static func opening(_ text: String) -> [String] {
        let sections = DocText.sections(text)
        return sections.prefix { $0.level < 2 }.flatMap(\.lines)
    }

    @Test func theRulesCountersCatchWhatTheyAreFor() {
        let cell = String(repeating: "c", count: Self.cellCharacters)
        let document = """
            # Title

            One two three.

            | a | b |
            |---|---|
            | four | \(cell) |

            ```
            not counted at all, however long: \(String(repeating: "x ", count: 80))
            ```
            """
        // The title 1, the prose 3, the table 2 + 0 + 2 (its bars and dashes are no words), the code 0.
        #expect(Self.words(document) == 1 + 3 + 2 + 2)
        #expect(Self.wideProseLines(document, columns: Self.designColumns).isEmpty, "the table and code are not prose")
        #expect(Self.longCells(document, characters: Self.cellCharacters).isEmpty, "a cell of exactly the limit passes")

        let wider = document.replacingOccurrences(of: "One two three.", with: String(repeating: "w", count: 101))
        #expect(Self.wideProseLines(wider, columns: Self.designColumns).map(\.number) == [3])
        let longer = document.replacingOccurrences(of: cell, with: cell + "c")
        #expect(Self.longCells(longer, characters: Self.cellCharacters) == [cell + "c"])
        let fenceInside = document + "\n```\n" + String(repeating: "word ", count: 50) + "\n```\n"
        #expect(Self.words(fenceInside) == Self.words(document), "words in a later code block count")
    }

    @Test func designTellsTheDesignInAtMost3500Words() throws {
        let words = Self.words(try DocText.read("docs/DESIGN.md"))
        #expect(words > 1_000, "DESIGN.md has only \(words) words: the counter reads nothing")
        #expect(
            words <= Self.designWords,
            "DESIGN.md has \(words) words, over \(Self.designWords): move a deep dive to a focused document"
        )
    }

    @Test func designProseIsWrappedAt100Columns() throws {
        for line in Self.wideProseLines(try DocText.read("docs/DESIGN.md"), columns: Self.designColumns) {
            Issue.record(
                "DESIGN.md line \(line.number) has \(line.text.count) characters, over \(Self.designColumns): wrap it"
            )
        }
    }

    @Test func noTableCellOfDesignOrReadmeIsOver300Characters() throws {
        for document in ["docs/DESIGN.md", "README.md"] {
            let text = try DocText.read(document)
            #expect(!DocText.tables(text.components(separatedBy: "\n")).isEmpty, "\(document) has no table")
            for cell in Self.longCells(text, characters: Self.cellCharacters) {
                let limit = Self.cellCharacters
                Issue.record("\(document): a cell of \(cell.count) characters, over \(limit): \(cell.prefix(60))…")
            }
        }
    }

    @Test func everyDocumentInDocsKeepsItsWordCap() throws {
        let documents = try DocText.docs()
        for document in ["DESIGN", "OPERATIONS", "BENCHMARKS", "PROTOCOL", "CONFIG"] {
            #expect(documents.contains("docs/\(document).md"), "docs/ lists no \(document).md")
        }
        for document in documents {
            let cap = Self.wordCaps[document] ?? Self.anyDocumentWords
            let words = Self.words(try DocText.read(document))
            #expect(words <= cap, "\(document) has \(words) words, over \(cap): split it by concern")
        }
    }

    /// README.md opens, under its title, with one sentence of what the agent is, then a block of
    /// its two commands exactly: the demo agent and the whole test suite.
    @Test func readmeOpensWithOneSentenceThenItsTwoCommands() throws {
        let lines = Self.opening(try DocText.read("README.md"))
        var rest = lines.drop { $0.trimmingCharacters(in: .whitespaces).isEmpty }
        let paragraph = rest.prefix { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        rest = rest.dropFirst(paragraph.count)
        let sentence = paragraph.map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        #expect(sentence.hasPrefix("`fleet-tokend` is "), "README.md does not open by saying what the agent is")
        let ends = sentence.split(separator: " ").filter { $0.hasSuffix(".") || $0.hasSuffix("?") || $0.hasSuffix("!") }
        #expect(sentence.hasSuffix(".") && ends.count == 1, "README.md's opening is not one sentence: \(sentence)")

        let beforeBlock = rest.prefix { !$0.hasPrefix("```") }
        for line in beforeBlock where !line.trimmingCharacters(in: .whitespaces).isEmpty {
            #expect(line.hasPrefix("<!--"), "README.md has more than one sentence before its commands: \(line)")
        }
        rest = rest.dropFirst(beforeBlock.count)
        try #require(
            rest.first?.hasPrefix("```") == true,
            "README.md's opening sentence is not followed by its commands"
        )
        let block = rest.dropFirst().prefix { !$0.hasPrefix("```") }
        let commands = block.map { line in
            (line.split(separator: "#", maxSplits: 1).first.map(String.init) ?? "").trimmingCharacters(in: .whitespaces)
        }
        #expect(commands == ["bash scripts/serve-demo", "bash scripts/test"], "README.md's two commands: \(commands)")
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
