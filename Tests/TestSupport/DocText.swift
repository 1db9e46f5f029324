import Foundation
import Testing

/// The repository's documents, read by the doc tests: Markdown sections, tables and fenced blocks,
/// and the man page. Shared by several test targets (the `TestSupport` target).
public enum DocText {
    /// Expects `found` to list each of `expected` once, in any order, and nothing else: a name
    /// listed twice, one `expected` lacks (worded by `missing`) and one it does not know (worded by
    /// `unknown`) are each an issue.
    public static func expectSame(
        _ found: [String],
        _ expected: [String],
        _ what: String,
        missing: ([String]) -> String,
        unknown: ([String]) -> String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let duplicates = Dictionary(grouping: found, by: { $0 }).filter { $0.value.count > 1 }.keys.sorted()
        #expect(duplicates.isEmpty, "\(what): listed twice: \(duplicates)", sourceLocation: sourceLocation)
        let absent = Set(expected).subtracting(found).sorted()
        let extra = Set(found).subtracting(expected).sorted()
        #expect(absent.isEmpty, "\(what): \(missing(absent))", sourceLocation: sourceLocation)
        #expect(extra.isEmpty, "\(what): \(unknown(extra))", sourceLocation: sourceLocation)
    }

    /// The repository root: the first directory above this file holding `Package.swift` and
    /// `Sources/TokenWire`.
    public static func root(_ file: String = #filePath) -> URL {
        var directory = URL(fileURLWithPath: file).deletingLastPathComponent()
        while directory.path != "/" {
            let manifest = directory.appendingPathComponent("Package.swift").path
            let wire = directory.appendingPathComponent("Sources/TokenWire").path
            if FileManager.default.fileExists(atPath: manifest), FileManager.default.fileExists(atPath: wire) {
                return directory
            }
            directory = directory.deletingLastPathComponent()
        }
        fatalError("no repository root above \(file)")
    }

    /// The text of `path`, relative to the repository root.
    public static func read(_ path: String) throws -> String {
        try String(contentsOf: root().appendingPathComponent(path), encoding: .utf8)
    }

    /// The files directly in `folder` (relative to the repository root) whose names end with
    /// `suffix`, as paths from the root, sorted.
    public static func files(in folder: String, endingWith suffix: String) throws -> [String] {
        let names = try FileManager.default.contentsOfDirectory(atPath: root().appendingPathComponent(folder).path)
        return names.filter { $0.hasSuffix(suffix) }.sorted().map { folder + "/" + $0 }
    }

    /// The Swift files under `folder` (relative to the repository root, at any depth), as paths
    /// from the root, sorted; symbolic links left out, so each file is counted once, where it is.
    public static func swiftFiles(under folder: String) throws -> [String] {
        let base = root().appendingPathComponent(folder).path
        let manager = FileManager.default
        let found = try #require(manager.enumerator(atPath: base), "cannot list \(folder)")
        var files: [String] = []
        for case let path as String in found where path.hasSuffix(".swift") {
            let attributes = try manager.attributesOfItem(atPath: base + "/" + path)
            if attributes[.type] as? FileAttributeType == .typeSymbolicLink { continue }
            files.append(folder + "/" + path)
        }
        return files.sorted()
    }

    /// The documents in docs/, as paths from the repository root.
    public static func docs() throws -> [String] {
        try files(in: "docs", endingWith: ".md")
    }

    /// The articles of every module's DocC catalog (`Sources/<Module>/<Module>.docc/*.md`).
    public static func catalogArticles() throws -> [String] {
        var articles: [String] = []
        for module in try files(in: "Sources", endingWith: "") {
            let catalog = module + "/" + (module.split(separator: "/").last.map(String.init) ?? module) + ".docc"
            var isFolder: ObjCBool = false
            let path = root().appendingPathComponent(catalog).path
            if FileManager.default.fileExists(atPath: path, isDirectory: &isFolder), isFolder.boolValue {
                articles += try files(in: catalog, endingWith: ".md")
            }
        }
        return articles
    }

    /// Lines as `wc -l` counts them, a last line without LF included.
    public static func lineCount(_ text: String) -> Int {
        let breaks = text.utf8.reduce(0) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 }
        return text.isEmpty || text.hasSuffix("\n") ? breaks : breaks + 1
    }

    /// A Markdown section: a heading and the lines up to the next heading of any level.
    public struct Section {
        public var level: Int
        public var title: String
        /// 1-based line number of the heading in the document (0 for the text before any heading).
        public var line: Int
        public var lines: [String]
    }

    /// The document's sections, in order. `#` lines inside fenced code blocks are not headings.
    public static func sections(_ text: String) -> [Section] {
        var sections = [Section(level: 0, title: "", line: 0, lines: [])]
        var fence: String?
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if let open = fence {
                if trimmed.hasPrefix(open), trimmed.allSatisfy({ $0 == "`" || $0 == "~" }) { fence = nil }
            } else if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                fence = String(trimmed.prefix(while: { $0 == "`" || $0 == "~" }))
            } else if line.hasPrefix("#") {
                let level = line.prefix(while: { $0 == "#" }).count
                let rest = line.dropFirst(level)
                if level <= 6, rest.first == " " {
                    sections.append(
                        Section(
                            level: level,
                            title: rest.trimmingCharacters(in: .whitespaces),
                            line: index + 1,
                            lines: []
                        )
                    )
                    continue
                }
            }
            sections[sections.count - 1].lines.append(line)
        }
        return sections
    }

    /// The fragments a Markdown link may name in a document (`#the-socket-loop`): each heading's
    /// text lower-cased, with spaces as `-` and every character other than a letter, a digit, `-`
    /// or `_` left out; a repeated heading gets `-1`, `-2`, ... as GitHub numbers them.
    public static func anchors(_ text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var anchors: Set<String> = []
        for section in sections(text) where section.level > 0 {
            let slug = String(
                section.title.lowercased().compactMap { character -> Character? in
                    if character == " " { return "-" }
                    let kept = character.isLetter || character.isNumber || character == "-" || character == "_"
                    return kept ? character : nil
                }
            )
            if let count = seen[slug] {
                seen[slug] = count + 1
                anchors.insert("\(slug)-\(count + 1)")
            } else {
                seen[slug] = 0
                anchors.insert(slug)
            }
        }
        return anchors
    }

    /// A Markdown link's target, with the 1-based line it is on.
    public struct Link {
        public var target: String
        public var line: Int
    }

    /// The targets of the inline links (`[text](target)`) of a Markdown document, outside fenced
    /// code blocks.
    public static func links(_ text: String) throws -> [Link] {
        let pattern = try Regex(#"\]\(([^)\s]+)\)"#)
        var links: [Link] = []
        var fence: String?
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if let open = fence {
                if trimmed.hasPrefix(open), trimmed.allSatisfy({ $0 == "`" || $0 == "~" }) { fence = nil }
                continue
            }
            if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                fence = String(trimmed.prefix(while: { $0 == "`" || $0 == "~" }))
                continue
            }
            for match in line.matches(of: pattern) {
                let whole = line[match.range]
                links.append(Link(target: String(whole.dropFirst(2).dropLast()), line: index + 1))
            }
        }
        return links
    }

    /// The lines of the section titled `title` and of every section under it.
    public static func section(_ title: String, in text: String) -> [String]? {
        let all = sections(text)
        guard let start = all.firstIndex(where: { $0.title == title }) else { return nil }
        var lines = all[start].lines
        for section in all[(start + 1)...] {
            if section.level <= all[start].level { break }
            lines.append("#" + String(repeating: "#", count: section.level - 1) + " " + section.title)
            lines += section.lines
        }
        return lines
    }

    /// A Markdown table: its header cells and its rows' cells, trimmed.
    public struct Table {
        public var header: [String]
        public var rows: [[String]]

        /// The cells of the column headed `name`.
        public func column(_ name: String) -> [String]? {
            guard let index = header.firstIndex(of: name) else { return nil }
            return rows.map { index < $0.count ? $0[index] : "" }
        }
    }

    /// The tables among `lines` (outside fenced code blocks). `\|` inside a cell is a literal bar.
    public static func tables(_ lines: [String]) -> [Table] {
        var tables: [Table] = []
        var current: [[String]] = []
        var fenced = false
        func flush() {
            // A table is a header row, a delimiter row of dashes, then rows.
            if current.count >= 2, current[1].allSatisfy({ !$0.isEmpty && $0.allSatisfy { "-:".contains($0) } }) {
                tables.append(Table(header: current[0], rows: Array(current.dropFirst(2))))
            }
            current = []
        }
        for line in lines {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.hasPrefix("```") {
                fenced.toggle()
                flush()
                continue
            }
            if !fenced, trimmed.hasPrefix("|") {
                current.append(cells(trimmed))
            } else {
                flush()
            }
        }
        flush()
        return tables
    }

    private static func cells(_ row: String) -> [String] {
        let bar = "\u{E000}"
        var text = row.replacingOccurrences(of: "\\|", with: bar)
        if text.hasPrefix("|") { text.removeFirst() }
        if text.hasSuffix("|") { text.removeLast() }
        return text.components(separatedBy: "|").map {
            $0.replacingOccurrences(of: bar, with: "|").trimmingCharacters(in: .whitespaces)
        }
    }

    /// The `code spans` of a piece of Markdown, in order.
    public static func codeSpans(_ text: String) -> [String] {
        var spans: [String] = []
        var rest = Substring(text)
        while let open = rest.firstIndex(of: "`") {
            let ticks = rest[open...].prefix(while: { $0 == "`" })
            let after = rest[ticks.endIndex...]
            guard let close = after.range(of: String(ticks)) else { break }
            spans.append(after[..<close.lowerBound].trimmingCharacters(in: .whitespaces))
            rest = after[close.upperBound...]
        }
        return spans
    }

    /// A fenced code block.
    public struct FencedBlock {
        /// The info string's first word (`sh`, `console`, `json`, ...), or empty.
        public var language: String
        /// 1-based line number of the opening fence.
        public var line: Int
        public var lines: [String]
        /// The last non-blank line before the opening fence.
        public var before: String
    }

    /// The fenced code blocks of a Markdown document.
    public static func fencedBlocks(_ text: String) -> [FencedBlock] {
        var blocks: [FencedBlock] = []
        var open: (fence: String, block: FencedBlock)?
        var lastText = ""
        for (index, line) in text.components(separatedBy: "\n").enumerated() {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if var current = open {
                if trimmed.hasPrefix(current.fence), trimmed.allSatisfy({ $0 == current.fence.first }) {
                    blocks.append(current.block)
                    open = nil
                    lastText = trimmed
                } else {
                    current.block.lines.append(line)
                    open = current
                }
            } else if trimmed.hasPrefix("```") || trimmed.hasPrefix("~~~") {
                let fence = String(trimmed.prefix(while: { $0 == trimmed.first }))
                let info = trimmed.dropFirst(fence.count).split(separator: " ").first.map(String.init) ?? ""
                open = (fence, FencedBlock(language: info, line: index + 1, lines: [], before: lastText))
            } else if !trimmed.isEmpty {
                lastText = trimmed
            }
        }
        return blocks
    }

    /// Backslash escapes of roff undone (`\-` to `-`, `\\` to `\`), for reading the man page.
    public static func unroff(_ text: String) -> String {
        text.replacingOccurrences(of: "\\-", with: "-").replacingOccurrences(of: "\\\\", with: "\\")
            .replacingOccurrences(of: "\\fB", with: "").replacingOccurrences(of: "\\fI", with: "")
            .replacingOccurrences(of: "\\fR", with: "").replacingOccurrences(of: "\\fP", with: "")
    }
}
