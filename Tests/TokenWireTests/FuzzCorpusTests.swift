import Foundation
import TestSupport
import Testing
import TokenWire

@testable import TestOracles

/// Replays the libFuzzer seed corpus (`Tests/Fuzz/corpus`, see `scripts/fuzz`) through
/// ``RequestLinesOracle`` (`Tests/TestOracles/RequestLinesOracle.swift`): each
/// file's stream cut as the file asks, in one chunk, a byte at a time and in random chunks.
@Suite("Fuzz corpus replay")
struct FuzzCorpusTests {
    /// `Tests/Fuzz/corpus`.
    static let corpus = FuzzCorpus.directory(named: "corpus")

    /// The corpus files, sorted by name; throws when the directory cannot be read.
    static func corpusFiles() throws -> [URL] { try FuzzCorpus.files(named: "corpus") }

    @Test func everyCorpusFilePassesTheOracle() throws {
        let files = try Self.corpusFiles()
        try #require(files.count >= 10, "expected the seed corpus in \(Self.corpus.path)")
        var random = SeededGenerator(seed: 0x000F_7A55)
        for file in files {
            let input = RequestLinesOracle.input(fuzzData: Array(try Data(contentsOf: file)))
            let count = input.stream.count
            var chunkings: [(String, [Int])] = [
                ("as the file says", RequestLinesOracle.cuts(count: count, chunkLengths: input.chunkLengths)),
                ("in one chunk", RequestLinesOracle.cuts(count: count, chunkLengths: [])),
                ("a byte at a time", RequestLinesOracle.cuts(count: count, chunkLengths: [1])),
            ]
            for round in 0..<3 {
                let lengths = (0..<5).map { _ in Int.random(in: 1...(round == 2 ? 5000 : 40), using: &random) }
                chunkings.append(
                    ("in chunks of \(lengths)", RequestLinesOracle.cuts(count: count, chunkLengths: lengths))
                )
            }
            for (how, cuts) in chunkings {
                let problems = RequestLinesOracle.problems(stream: input.stream, cuts: cuts)
                #expect(problems.isEmpty, "\(file.lastPathComponent), \(how):\n\(problems.joined(separator: "\n"))")
            }
        }
    }

    @Test func referenceFramingReportsPartialLinesWhereChunksEnd() {
        let stream = Array("PING\nGET v".utf8)
        #expect(
            RequestLinesOracle.expectedEvents(stream: stream, cuts: [2, 10])
                == [.partialLine, .line(Array("PING".utf8)), .partialLine, .lastLine(Array("GET v".utf8))]
        )
        #expect(
            RequestLinesOracle.expectedEvents(stream: stream, cuts: [5, 10])
                == [.line(Array("PING".utf8)), .partialLine, .lastLine(Array("GET v".utf8))]
        )
        let long = [UInt8](repeating: 0x78, count: WireLimits.maxRequestLineBytes + 1) + Array("\nPING\n".utf8)
        #expect(RequestLinesOracle.expectedEvents(stream: long, cuts: [long.count]) == [.tooLong])
        #expect(RequestLinesOracle.expectedEvents(stream: long, cuts: [4097, long.count]) == [.partialLine, .tooLong])
        #expect(RequestLinesOracle.expectedEvents(stream: long, cuts: [4098, long.count]) == [.tooLong])
    }

    @Test func fuzzInputsCarryTheirChunking() {
        let stream = Array("PING\n".utf8)
        let input = RequestLinesOracle.input(
            fuzzData: RequestLinesOracle.fuzzData(stream: stream, chunkLengths: [2, 1])
        )
        #expect(input.stream == stream)
        #expect(RequestLinesOracle.cuts(count: stream.count, chunkLengths: input.chunkLengths) == [2, 3, 5])
        #expect(RequestLinesOracle.input(fuzzData: [0x81, 0x00] + stream).chunkLengths == [17])
        #expect(RequestLinesOracle.input(fuzzData: []).stream.isEmpty)
    }

    /// Lines where ``RequestParser`` once disagreed with docs/PROTOCOL.md, found by `scripts/fuzz`:
    /// a second trailing CR dropped, verbs upper-cased with Unicode's full mapping (`ſ` → `S`,
    /// `ı` → `I`, `ﬆ` → `ST`), and fields split at grapheme clusters instead of U+0020.
    @Test(arguments: [
        "PING\r\r", "GET vehicle v-1\r\r", "ſtats", "pıng", "ﬆats", "GET vehicle a\u{0D4E} 5", "GET vehicle \u{301}a",
    ])
    func formerParserDeviation(line: String) {
        let problems = RequestLinesOracle.requestProblems(Array(line.utf8))
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
    }
}
