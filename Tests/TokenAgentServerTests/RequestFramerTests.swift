import Foundation
import NIOCore
import NIOTestUtils
import TestSupport
import Testing
import TokenWire

@testable import TestOracles
@testable import TokenAgentServer

/// ``RequestFramer``: NIO's decoder verifier (through a decoder that wraps it), the 4096-byte
/// limit, CRLF, partial-line news, lines taken in place (``RequestFramer/takeLine(_:)``), and the
/// fuzz corpus replayed in random chunks against ``RequestLinesOracle``
/// (`Tests/TestOracles/RequestLinesOracle.swift`), framed and taken in place.
@Suite("Request framer")
struct RequestFramerTests {
    private static let limit = WireLimits.maxRequestLineBytes

    // MARK: NIO's verifier

    /// NIO's verifier feeds the inputs whole, a byte at a time (each byte in its own buffer, with
    /// bytes before and after it outside the readable window) and all at once, through one
    /// decoder, and expects the same frames every way. The framer is no decoder of its own (the
    /// request handler drives it read by read), so the verifier runs it inside ``LinesOnly``,
    /// which also drops ``RequestFrame/partialLine``: that news depends on where chunks end by
    /// design (a byte at a time, every non-empty line has one); it is checked on its own below. Too-long lines end the framing for good, so they cannot be among the
    /// verifier's shuffled and repeated inputs either.
    @Test func verifierGetsTheSameLinesHoweverTheInputIsSplit() throws {
        let pairs: [(String, [String])] = [
            ("PING\n", ["PING"]),
            ("GET vehicle v-1\r\n", ["GET vehicle v-1\r"]),
            ("\n", [""]),
            ("\r\n", ["\r"]),
            ("GET trip t-1 60\nPING\nHELP\n", ["GET trip t-1 60", "PING", "HELP"]),
            ("GET vehicle a\u{0}b\nPI\rNG\n", ["GET vehicle a\u{0}b", "PI\rNG"]),
            (
                "GET vehicle " + String(repeating: "x", count: Self.limit - 12) + "\n",
                ["GET vehicle " + String(repeating: "x", count: Self.limit - 12)]
            ),
            (
                "REFRESH vehicle " + String(repeating: "y", count: Self.limit - 16) + "\r\n",
                ["REFRESH vehicle " + String(repeating: "y", count: Self.limit - 16) + "\r"]
            ),
        ]
        let allocator = ByteBufferAllocator()
        var inputOutputPairs = pairs.map { input, lines in
            (allocator.buffer(string: input), lines.map { RequestFrame.line(allocator.buffer(string: $0)) })
        }
        inputOutputPairs.append(
            (
                allocator.buffer(bytes: Array("GET vehicle ".utf8) + [0xC3, 0x28, 0x0A]),
                [.line(allocator.buffer(bytes: Array("GET vehicle ".utf8) + [0xC3, 0x28]))]
            )
        )
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: inputOutputPairs) { LinesOnly() }
    }

    // MARK: Partial lines, CRLF, the limit, end of input

    @Test func partialLineIsReportedOncePerLineBeforeItsLine() throws {
        #expect(
            try frames(["GE", "T vehi", "cle v-1", "\nPI", "NG\n"])
                == [.partialLine, .line(Array("GET vehicle v-1".utf8)), .partialLine, .line(Array("PING".utf8))]
        )
        #expect(try frames(["PING\nHELP\n"]) == [.line(Array("PING".utf8)), .line(Array("HELP".utf8))])
        #expect(
            try frames(["PING\n", "\n"]) == [.line(Array("PING".utf8)), .line([])],
            "an LF alone is no partial line"
        )
    }

    @Test func crBeforeLFStaysInTheLineForTheParser() throws {
        #expect(try frames(["PING\r\n"]) == [.line(Array("PING\r".utf8))])
        #expect(try frames(["PING\r", "\n"]) == [.partialLine, .line(Array("PING\r".utf8))])
        #expect(try frames(["\r\n\r\n"]) == [.line([0x0D]), .line([0x0D])])
    }

    @Test func fourThousandNinetySixBytesIsALineAndOneMoreIsTooLong() throws {
        let full = [UInt8](repeating: UInt8(ascii: "x"), count: Self.limit)
        let ping = Array("PING\n".utf8)
        #expect(try frames([full + [0x0A] + ping]) == [.line(full), .line(Array("PING".utf8))])
        #expect(
            try frames([full + [0x0D, 0x0A] + ping]) == [.line(full + [0x0D]), .line(Array("PING".utf8))],
            "CR not counted"
        )
        #expect(try frames([full, [0x0D], [0x0A]]) == [.partialLine, .line(full + [0x0D])])
        // One byte more: too long, and nothing after it is framed, now or later.
        #expect(try frames([ping + full + [0x78, 0x0A] + ping, ping]) == [.line(Array("PING".utf8)), .tooLong])
        #expect(try frames([full + [0x78, 0x0D, 0x0A] + ping]) == [.tooLong], "4097 bytes and a CR")
        #expect(try frames([full + [0x0D, 0x0D, 0x0A]]) == [.tooLong], "only one CR is not counted")
        // 4097 bytes without LF may still be 4096 and a CR; a 4098th byte that is not LF ends it.
        #expect(try frames([full + [0x78], ping]) == [.partialLine, .tooLong])
        #expect(try frames([full + [0x78, 0x78]]) == [.tooLong])
        #expect(try frames([full + [0x78, 0x78]], endOfInput: true) == [.tooLong], "nothing is left at end of input")
        #expect(try frames([[0x78], full, ping]) == [.partialLine, .tooLong])
    }

    @Test func lastLineWithoutLFIsDeliveredAtEndOfInput() throws {
        #expect(
            try frames(["PING\nGET v"], endOfInput: true)
                == [.line(Array("PING".utf8)), .partialLine, .lastLine(Array("GET v".utf8))]
        )
        #expect(try frames(["PING\n"], endOfInput: true) == [.line(Array("PING".utf8))])
        #expect(try frames([String](), endOfInput: true) == [])
    }

    // MARK: Lines taken in place

    @Test func aLineTakenInPlaceIsConsumedAndOneLeftIsFramedAsBefore() throws {
        var framer = RequestFramer()
        framer.append(bytes: "GET vehicle a\nPING\nGET trip b\r\nGET v")
        var seen: [String] = []
        // Each step: what `takeLine` said, or the frame `next()` gave ("-" for none).
        var steps: [String] = []
        func take() {
            let taken = framer.takeLine { line in
                seen.append(String(decoding: line, as: UTF8.self))
                return line.starts(with: "GET ".utf8)
            }
            steps.append(taken ? "taken" : "left")
        }
        func next() {
            switch framer.next() {
            case .line(let line): steps.append("line " + String(buffer: line))
            case .partialLine: steps.append("partial")
            case .tooLong: steps.append("too long")
            case nil: steps.append("-")
            }
        }
        take()
        take()  // PING is left...
        next()  // ...and framed as before
        take()  // its CR stays in the line, as in a frame
        take()  // no whole line: the body is not called
        next()
        framer.append(bytes: "ehicle c\n")
        take()
        next()
        #expect(steps == ["taken", "left", "line PING", "taken", "left", "partial", "taken", "-"])
        #expect(seen == ["GET vehicle a", "PING", "GET trip b\r", "GET vehicle c"])
        let last = framer.finish()
        #expect(last == nil, "nothing is left")
    }

    @Test func aReadsLinesAreTakenWhereTheyAreUntilOneIsLeftThenTheRestIsCopied() throws {
        var framer = RequestFramer()
        var offered: [String] = []
        func read(_ text: String, taking: @escaping (String) -> Bool) {
            // The read's bytes are overwritten once it is taken, as the loop's buffer is by the
            // next read: what the framer kept must be its own copy.
            var bytes = Array(text.utf8)
            bytes.withUnsafeBytes { raw in
                framer.take(read: raw) { line in
                    let text = String(decoding: line, as: UTF8.self)
                    offered.append(text)
                    return taking(text)
                }
            }
            for index in bytes.indices { bytes[index] = UInt8(ascii: "#") }
        }
        func line(_ text: String) -> RequestFrame { .line(ByteBuffer(string: text)) }

        read("GET vehicle a\nGET vehicle b\nPING\nGET trip c\r\nGET v") { $0.hasPrefix("GET ") }
        #expect(offered == ["GET vehicle a", "GET vehicle b", "PING"], "offered until one is left")
        #expect(framer.next() == line("PING"))
        #expect(framer.next() == line("GET trip c\r"))
        #expect(framer.next() == .partialLine)
        #expect(framer.next() == nil)

        // With a partial line kept, a read completes it: nothing is offered where it is.
        offered = []
        read("ehicle d\nGET vehicle e\n") { _ in true }
        #expect(offered == [])
        #expect(framer.next() == line("GET vehicle d"))
        #expect(framer.next() == line("GET vehicle e"))
        #expect(framer.next() == nil)

        // Empty again: the next read's lines are offered, and all taken, nothing kept.
        read("GET vehicle f\nGET vehicle g\n") { _ in true }
        #expect(offered == ["GET vehicle f", "GET vehicle g"])
        #expect(framer.next() == nil)
        #expect(framer.finish() == nil)

        // A line over the limit is never offered, nor anything after it.
        offered = []
        read("GET vehicle " + String(repeating: "x", count: Self.limit) + "\nGET vehicle h\n") { _ in true }
        #expect(offered == [])
        #expect(framer.next() == .tooLong)
        read("GET vehicle i\n") { _ in true }
        #expect(offered == [], "after a line over the limit, the input is dropped")
        #expect(framer.next() == nil)
    }

    @Test func aLineOverTheLimitIsNeverTakenInPlace() throws {
        var framer = RequestFramer()
        let long = "GET vehicle " + String(repeating: "x", count: Self.limit) + "\nPING\n"
        framer.append(bytes: long)
        var handedOut = 0
        let first = framer.takeLine { _ in
            handedOut += 1
            return true
        }
        let frame = framer.next()
        let afterIt = framer.takeLine { _ in
            handedOut += 1
            return true
        }
        let then = framer.next()
        #expect(!first && !afterIt && handedOut == 0, "no line over the limit, nor after it, is handed out")
        #expect(frame == .tooLong)
        #expect(then == nil)
    }

    // MARK: The corpus

    @Test func fuzzCorpusInRandomChunksMatchesTheOracle() throws {
        let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fuzz/corpus")
        let files = try FileManager.default.contentsOfDirectory(atPath: corpus.path).sorted()
        try #require(files.count >= 10, "expected the seed corpus in \(corpus.path)")
        var random = SeededGenerator(seed: 0xDEC0_DE25)
        for name in files {
            let input = RequestLinesOracle.input(
                fuzzData: Array(try Data(contentsOf: corpus.appendingPathComponent(name)))
            )
            let count = input.stream.count
            var chunkings = [
                RequestLinesOracle.cuts(count: count, chunkLengths: input.chunkLengths),
                RequestLinesOracle.cuts(count: count, chunkLengths: [1]),
            ]
            for round in 0..<4 {
                let lengths = (0..<6).map { _ in Int.random(in: 1...(round == 3 ? 6000 : 64), using: &random) }
                chunkings.append(RequestLinesOracle.cuts(count: count, chunkLengths: lengths))
            }
            for cuts in chunkings {
                var chunks: [[UInt8]] = []
                var start = 0
                for cut in cuts {
                    chunks.append(Array(input.stream[start..<cut]))
                    start = cut
                }
                let expected = RequestLinesOracle.expectedEvents(stream: input.stream, cuts: cuts)
                let actual = try frames(chunks, endOfInput: true)
                #expect(actual == expected, "\(name) cut at \(cuts)")
                // Lines taken in place (the fast path's way) frame the same: every other line
                // taken by length, the rest left to `next()`.
                let mixed = try frames(chunks, endOfInput: true, taking: { $0.count % 2 == 0 })
                #expect(mixed == expected, "\(name) cut at \(cuts), even lines taken in place")
                for event in actual {
                    if case .line(let line) = event, line.count > Self.limit + 1 {
                        Issue.record("\(name): a framed line of \(line.count) bytes")
                    }
                }
            }
        }
    }

    // MARK: Helpers

    /// Gives `chunks` to a framer, one read each, taking every frame after each, then (with
    /// `endOfInput`) its last line, and returns the frames; a line given at end of input is a
    /// ``RequestLinesOracle/Event/lastLine(_:)``.
    private func frames(
        _ chunks: [[UInt8]],
        endOfInput: Bool = false,
        taking: ((UnsafeRawBufferPointer) -> Bool)? = nil
    ) throws -> [RequestLinesOracle.Event] {
        var framer = RequestFramer()
        var events: [RequestLinesOracle.Event] = []
        func record(_ frame: RequestFrame, atEnd: Bool) {
            switch frame {
            case .line(let buffer):
                events.append(
                    atEnd ? .lastLine(Array(buffer.readableBytesView)) : .line(Array(buffer.readableBytesView))
                )
            case .partialLine: events.append(.partialLine)
            case .tooLong: events.append(.tooLong)
            }
        }
        for chunk in chunks {
            // With `taking`, each read's whole lines are offered where they are first, as a
            // read's are; the rest is kept and offered again below.
            chunk.withUnsafeBytes { read in
                guard let taking else { return framer.append(read) }
                framer.take(read: read) { line in
                    guard taking(line) else { return false }
                    events.append(.line(Array(line)))
                    return true
                }
            }
            while true {
                // With `taking`, each line is offered in place first (as the fast path does).
                if let taking,
                    framer.takeLine({ line in
                        guard taking(line) else { return false }
                        events.append(.line(Array(line)))
                        return true
                    })
                {
                    continue
                }
                guard let frame = framer.next() else { break }
                record(frame, atEnd: false)
            }
        }
        if endOfInput, let last = framer.finish() { record(last, atEnd: true) }
        return events
    }

    private func frames(_ chunks: [String], endOfInput: Bool = false) throws -> [RequestLinesOracle.Event] {
        try frames(chunks.map { Array($0.utf8) }, endOfInput: endOfInput)
    }
}

extension RequestFrame: Equatable {
    /// Frames are equal when they are the same case and, for lines, hold the same bytes.
    public static func == (lhs: RequestFrame, rhs: RequestFrame) -> Bool {
        switch (lhs, rhs) {
        case (.line(let left), .line(let right)): return left.readableBytesView.elementsEqual(right.readableBytesView)
        case (.tooLong, .tooLong), (.partialLine, .partialLine): return true
        default: return false
        }
    }
}

/// The real ``RequestFramer`` as a decoder for NIO's verifier, its ``RequestFrame/partialLine``
/// news dropped: every buffer it is given is appended as is (reader index and neighbouring bytes
/// included), and every line or too-long frame is passed on.
private struct LinesOnly: ByteToMessageDecoder {
    typealias InboundOut = RequestFrame

    private var framer = RequestFramer()

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        buffer.withUnsafeReadableBytes { framer.append($0) }
        buffer.moveReaderIndex(to: buffer.writerIndex)
        forward(context: context)
        return .needMoreData
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        if buffer.readableBytes > 0 { _ = try decode(context: context, buffer: &buffer) }
        if let last = framer.finish() { context.fireChannelRead(Self.wrapInboundOut(last)) }
        return .needMoreData
    }

    private mutating func forward(context: ChannelHandlerContext) {
        while let frame = framer.next() {
            if case .partialLine = frame { continue }
            context.fireChannelRead(Self.wrapInboundOut(frame))
        }
    }
}

extension RequestFramer {
    /// Keeps a copy of `text`'s bytes, as a read's are kept.
    fileprivate mutating func append(bytes text: String) {
        Array(text.utf8).withUnsafeBytes { append($0) }
    }
}
