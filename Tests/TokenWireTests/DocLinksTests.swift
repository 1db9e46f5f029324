import Foundation
import TestSupport
import Testing

/// Every relative link in the repository's Markdown documents (the READMEs, docs/ and the DocC
/// catalogs' articles) names a file that exists and, for a Markdown file, a section it has: a
/// section that moves to another document takes its links along.
@Suite("Doc links")
struct DocLinksTests {
    private static func documents() throws -> [String] {
        try ["README.md", "packaging/kubernetes/README.md"] + DocText.docs() + DocText.catalogArticles()
    }

    @Test func everyRelativeLinkFindsItsFileAndSection() throws {
        let documents = try Self.documents()
        #expect(documents.contains("docs/DESIGN.md"))
        #expect(documents.contains { $0.hasSuffix(".docc/FleetTokenClient.md") })
        var checked = 0
        for document in documents {
            let folder = document.split(separator: "/").dropLast().joined(separator: "/")
            for link in try DocText.links(try DocText.read(document)) {
                let target = link.target
                if target.hasPrefix("http://") || target.hasPrefix("https://") || target.hasPrefix("mailto:") {
                    continue
                }
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                let file = String(parts[0])
                let path = file.isEmpty ? document : normalized(folder + "/" + file)
                guard FileManager.default.fileExists(atPath: DocText.root().appendingPathComponent(path).path) else {
                    Issue.record("\(document):\(link.line): \(target): no file \(path)")
                    continue
                }
                checked += 1
                if parts.count == 2, path.hasSuffix(".md") {
                    let anchor = String(parts[1])
                    let found = DocText.anchors(try DocText.read(path)).contains(anchor)
                    #expect(found, "\(document):\(link.line): \(path) has no section #\(anchor)")
                }
            }
        }
        #expect(checked > 100, "only \(checked) relative links found")
    }

    /// `folder/../file` as `file`, `./file` as `file`: a path from the repository root.
    private func normalized(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/") {
            if part == "." { continue }
            if part == "..", let last = parts.last, last != ".." {
                parts.removeLast()
            } else {
                parts.append(part)
            }
        }
        return parts.joined(separator: "/")
    }
}
