import Foundation
import TestSupport
import Testing
import TokenAgent

@testable import TestOracles

/// Replays the snapshot fuzzer's seed corpus (`Tests/Fuzz/cache-snapshots-corpus`, see
/// `scripts/fuzz`) through ``CacheSnapshotOracle`` (in the `TestOracles` target; the fuzzer's
/// package links the same file), and a few thousand mutations of it, so every CI run checks what
/// the fuzzer checks: a corrupt, truncated, foreign or hostile snapshot is never a crash and never
/// a wrong token.
@Suite("Cache-snapshot corpus replay")
struct CacheSnapshotCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/cache-snapshots-corpus")

    static func corpusFiles() throws -> [[UInt8]] {
        try FileManager.default.contentsOfDirectory(at: corpus, includingPropertiesForKeys: nil)
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
            .map { Array(try Data(contentsOf: $0)) }
    }

    @Test func everyCorpusFilePassesTheOracle() throws {
        let files = try Self.corpusFiles()
        try #require(files.count >= 40, "expected the seed corpus in \(Self.corpus.path)")
        for file in files {
            let problems = CacheSnapshotOracle.problems(fuzzData: file)
            #expect(problems.isEmpty, "\(String(decoding: file.prefix(200), as: UTF8.self)): \(problems)")
        }
    }

    /// Each seed with bytes changed, cut, doubled or swapped for the format's own separators.
    @Test func mutatedSeedsPassTheOracle() throws {
        var random = SeededGenerator(seed: 0x5A_4A45)
        let pieces = ["\t", "\n", "\r", "#", "*", "-", "0", "9", "v3", "v2", "\u{00e9}", "\t1800000005\t"]
            .map { Array($0.utf8) }
        for file in try Self.corpusFiles() where !file.isEmpty {
            for round in 0..<40 {
                var bytes = file
                let at = Int.random(in: 0..<bytes.count, using: &random)
                switch round % 4 {
                case 0: bytes.replaceSubrange(at...at, with: pieces.randomElement(using: &random)!)
                case 1: bytes.removeSubrange(at...)
                case 2: bytes.insert(contentsOf: bytes[at...].prefix(64), at: at)
                default: bytes[at] = UInt8.random(in: 0...255, using: &random)
                }
                let problems = CacheSnapshotOracle.problems(fuzzData: bytes)
                #expect(problems.isEmpty, "\(String(decoding: bytes.prefix(200), as: UTF8.self)): \(problems)")
            }
        }
    }
}
