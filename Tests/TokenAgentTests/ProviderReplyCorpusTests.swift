import Foundation
import TestSupport
import Testing
import TokenAgent

@testable import TestOracles

/// Replays the provider-reply fuzzer's seed corpus (`Tests/Fuzz/provider-replies-corpus`, see
/// `scripts/fuzz`) through ``ProviderReplyOracle`` (in the `TestOracles` target; the fuzzer's
/// package links the same file), and a few thousand mutations of it, so every CI run checks what
/// the fuzzer checks.
@Suite("Provider-reply corpus replay")
struct ProviderReplyCorpusTests {
    static let corpus = FuzzCorpus.directory(named: "provider-replies-corpus")

    static func corpusFiles() throws -> [[UInt8]] { try FuzzCorpus.contents(named: "provider-replies-corpus") }

    @Test func everyCorpusFilePassesTheOracle() throws {
        let files = try Self.corpusFiles()
        try #require(files.count >= 50, "expected the seed corpus in \(Self.corpus.path)")
        for file in files {
            let problems = ProviderReplyOracle.problems(fuzzData: file)
            #expect(problems.isEmpty, "\(String(decoding: file.prefix(200), as: UTF8.self)): \(problems)")
        }
    }

    /// Each seed with digits, signs and exponents swapped in: numbers at every magnitude.
    @Test func mutatedNumbersPassTheOracle() throws {
        var random = SeededGenerator(seed: 0x0BAD_0E51)
        let replacements = Array(["9", "0", "-", "e", "E9", "e400", ".", "000", "9999999999"].map { Array($0.utf8) })
        for file in try Self.corpusFiles() {
            for _ in 0..<40 {
                var bytes = file
                let digits = bytes.indices.filter { (0x30...0x39).contains(bytes[$0]) }
                guard let at = digits.randomElement(using: &random) else { break }
                bytes.replaceSubrange(at...at, with: replacements.randomElement(using: &random)!)
                let problems = ProviderReplyOracle.problems(fuzzData: bytes)
                #expect(problems.isEmpty, "\(String(decoding: bytes.prefix(200), as: UTF8.self)): \(problems)")
            }
        }
    }
}
