import Foundation
import TestSupport
import Testing
import TokenAgent

@testable import TestOracles

/// A seed corpus of one of the agent's fuzzers (`Tests/Fuzz/AgentFuzzers`, see `scripts/fuzz`),
/// the oracle that fuzzer checks by (in the `TestOracles` target; the fuzzer's package links the
/// same file) and the mutations replayed of each seed.
struct AgentFuzzCorpus: Sendable, CustomTestStringConvertible {
    /// `Tests/Fuzz/<name>`.
    let name: String
    /// Fewer files than this means the corpus was not found.
    let minimumFiles: Int
    /// What the oracle finds wrong with an input.
    let problems: @Sendable ([UInt8]) -> [String]
    /// The seed of the mutations' random generator.
    let seed: UInt64
    /// The mutations of one seed file.
    let mutations: @Sendable ([UInt8], inout SeededGenerator) -> [[UInt8]]

    var testDescription: String { name }

    /// A provider's HTTP reply, read by ``ProviderReplyOracle``; each seed with digits, signs and
    /// exponents swapped in: numbers at every magnitude.
    static let providerReplies = AgentFuzzCorpus(
        name: "provider-replies-corpus",
        minimumFiles: 50,
        problems: { ProviderReplyOracle.problems(fuzzData: $0) },
        seed: 0x0BAD_0E51
    ) { file, random in
        let replacements = ["9", "0", "-", "e", "E9", "e400", ".", "000", "9999999999"].map { Array($0.utf8) }
        let digits = file.indices.filter { (0x30...0x39).contains(file[$0]) }
        guard !digits.isEmpty else { return [] }
        return (0..<40).map { _ in
            var bytes = file
            let at = digits.randomElement(using: &random)!
            bytes.replaceSubrange(at...at, with: replacements.randomElement(using: &random)!)
            return bytes
        }
    }

    /// A cache snapshot, read by ``CacheSnapshotOracle``: a corrupt, truncated, foreign or hostile
    /// snapshot is never a crash and never a wrong token. Each seed with bytes changed, cut,
    /// doubled or swapped for the format's own separators.
    static let cacheSnapshots = AgentFuzzCorpus(
        name: "cache-snapshots-corpus",
        minimumFiles: 40,
        problems: { CacheSnapshotOracle.problems(fuzzData: $0) },
        seed: 0x5A_4A45
    ) { file, random in
        let pieces = ["\t", "\n", "\r", "#", "*", "-", "0", "9", "v3", "v2", "\u{00e9}", "\t1800000005\t"]
            .map { Array($0.utf8) }
        guard !file.isEmpty else { return [] }
        return (0..<40).map { round in
            var bytes = file
            let at = Int.random(in: 0..<bytes.count, using: &random)
            switch round % 4 {
            case 0: bytes.replaceSubrange(at...at, with: pieces.randomElement(using: &random)!)
            case 1: bytes.removeSubrange(at...)
            case 2: bytes.insert(contentsOf: bytes[at...].prefix(64), at: at)
            default: bytes[at] = UInt8.random(in: 0...255, using: &random)
            }
            return bytes
        }
    }
}

/// Replays the agent fuzzers' seed corpora through their oracles, and a few thousand mutations of
/// them, so every CI run checks what the fuzzers check.
@Suite("Agent fuzz corpus replay")
struct AgentFuzzCorpusTests {
    static let corpora = [AgentFuzzCorpus.providerReplies, .cacheSnapshots]

    private func expectNoProblems(_ corpus: AgentFuzzCorpus, _ bytes: [UInt8]) {
        let problems = corpus.problems(bytes)
        #expect(problems.isEmpty, "\(String(decoding: bytes.prefix(200), as: UTF8.self)): \(problems)")
    }

    @Test(arguments: corpora)
    func everyCorpusFilePassesTheOracle(_ corpus: AgentFuzzCorpus) throws {
        let files = try FuzzCorpus.contents(named: corpus.name)
        let directory = FuzzCorpus.directory(named: corpus.name).path
        try #require(files.count >= corpus.minimumFiles, "expected the seed corpus in \(directory)")
        for file in files { expectNoProblems(corpus, file) }
    }

    @Test(arguments: corpora)
    func mutatedSeedsPassTheOracle(_ corpus: AgentFuzzCorpus) throws {
        var random = SeededGenerator(seed: corpus.seed)
        for file in try FuzzCorpus.contents(named: corpus.name) {
            for bytes in corpus.mutations(file, &random) { expectNoProblems(corpus, bytes) }
        }
    }
}
