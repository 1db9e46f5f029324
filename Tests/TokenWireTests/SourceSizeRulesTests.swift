import Foundation
import TestSupport
import Testing

/// The standing rule that keeps every source file readable in one sitting (issue 33 §4): no Swift
/// file under Sources/ or Tests/ runs past 450 lines. A longer one is split along its seams, into
/// extensions in files named for what they hold.
@Suite("Source size rules")
struct SourceSizeRulesTests {
    /// The most lines a Swift file may have.
    private static let limit = 450

    /// The files allowed over the limit for now, by path from the repository root, each with the
    /// change that is to split it. Listed one by one so the list cannot grow silently, and checked
    /// to be still over the limit so it shrinks once they are split.
    private static let exceptions: [String: String] = [:]

    /// The Swift files under `folder` (relative to the repository root), as paths from the root,
    /// sorted; symbolic links left out, so each file is
    /// counted once, where it is.
    private static func swiftFiles(under folder: String) throws -> [String] {
        let root = DocText.root().appendingPathComponent(folder).path
        let manager = FileManager.default
        let found = try #require(manager.enumerator(atPath: root), "cannot list \(folder)")
        var files: [String] = []
        for case let path as String in found where path.hasSuffix(".swift") {
            let attributes = try manager.attributesOfItem(atPath: root + "/" + path)
            if attributes[.type] as? FileAttributeType == .typeSymbolicLink { continue }
            files.append(folder + "/" + path)
        }
        return files.sorted()
    }

    private static func lineCount(_ path: String) throws -> Int {
        DocText.lineCount(try DocText.read(path))
    }

    @Test func noSwiftFileUnderSourcesOrTestsIsOver450Lines() throws {
        let files = try Self.swiftFiles(under: "Sources") + Self.swiftFiles(under: "Tests")
        #expect(files.contains("Sources/TokenWire/RequestParser.swift"), "the walk found no sources")
        #expect(files.contains("Tests/TokenWireTests/SourceSizeRulesTests.swift"), "the walk found no tests")
        for file in files where Self.exceptions[file] == nil {
            let lines = try Self.lineCount(file)
            #expect(
                lines <= Self.limit,
                "\(file) has \(lines) lines, over \(Self.limit): split it along its seams"
            )
        }
    }

    @Test func everyExceptionIsAFileStillOverTheLimit() throws {
        for (file, change) in Self.exceptions.sorted(by: { $0.key < $1.key }) {
            let path = DocText.root().appendingPathComponent(file).path
            guard FileManager.default.fileExists(atPath: path) else {
                Issue.record("\(file), an exception (\(change)), is gone: take it off the list")
                continue
            }
            let lines = try Self.lineCount(file)
            #expect(
                lines > Self.limit,
                "\(file) has \(lines) lines, within \(Self.limit) (\(change)): take it off the list"
            )
        }
    }
}
