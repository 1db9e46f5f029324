// The checks shared by the libFuzzer target (Tests/Fuzz/FuzzRequestLines.swift, built by
// scripts/fuzz together with the TokenWire sources, so TokenWire is not a separate module there)
// and the test targets that replay the corpus (through the TestOracles target, this file alone).
#if !TOKENWIRE_FUZZ_BUILD
    import TokenWire
#endif

/// The request-line path (``LineFramer`` and ``RequestParser``) checked against simple reference
/// models written from docs/PROTOCOL.md.
///
/// A fuzz input is a few header bytes that choose how the stream is cut into chunks, then the
/// stream. The framer is driven chunk by chunk exactly as the NIO decoder drives it (every
/// unconsumed byte passed, a line's length plus one consumed, nothing framed after a too-long
/// line, a last line without LF at end of input), and what it reports must equal what a splitter
/// that sees the whole stream at once expects for those cut points. Every framed line is then
/// parsed, and the result must equal a reference parser's (same request, or an error with the
/// same code) and survive re-encoding.
enum RequestLinesOracle {
    /// What a stream decoder reports, in order.
    enum Event: Hashable, Sendable, CustomStringConvertible {
        /// A line without its LF (a CR before the LF still there).
        case line([UInt8])
        /// The first bytes of a line arrived without its LF (once per line).
        case partialLine
        /// A line over the limit; nothing after it is framed.
        case tooLong
        /// The bytes left without LF at end of input: still a request.
        case lastLine([UInt8])

        var description: String {
            switch self {
            case .line(let bytes): return "line(\(RequestLinesOracle.escaped(bytes)))"
            case .partialLine: return "partialLine"
            case .tooLong: return "tooLong"
            case .lastLine(let bytes): return "lastLine(\(RequestLinesOracle.escaped(bytes)))"
            }
        }
    }

    /// What parsing a line comes to, errors told by code only.
    enum Outcome: Hashable, Sendable, CustomStringConvertible {
        case request(WireRequest)
        case error(WireErrorCode)

        var description: String {
            switch self {
            case .request(let request): return "\(request)"
            case .error(let code): return "ERR \(code.rawValue)"
            }
        }

        init(_ result: Result<WireRequest, WireError>) {
            switch result {
            case .success(let request): self = .request(request)
            case .failure(let error): self = .error(error.code)
            }
        }
    }

    /// A fuzz input taken apart: the stream and how to cut it.
    struct Input: Sendable {
        /// The bytes a client writes.
        var stream: [UInt8]
        /// The lengths of the chunks the stream arrives in, repeated until the stream is used up;
        /// empty for one chunk.
        var chunkLengths: [Int]
    }

    static let lf = UInt8(ascii: "\n")
    static let cr = UInt8(ascii: "\r")
    static let space = UInt8(ascii: " ")
    static let limit = WireLimits.maxRequestLineBytes

    // MARK: Inputs and chunks

    /// Takes a fuzz input apart. The first byte `h` says how many of the next bytes are chunk
    /// lengths (`(h & 0x7F) % 9`); each length is `byte + 1`, times 17 when `h` has its top bit
    /// set (so chunks can be longer than a line). The rest is the stream.
    static func input(fuzzData data: [UInt8]) -> Input {
        guard let header = data.first else { return Input(stream: [], chunkLengths: []) }
        let count = min(Int(header & 0x7F) % 9, data.count - 1)
        let scale = header & 0x80 != 0 ? 17 : 1
        let lengths = data[1..<(1 + count)].map { (Int($0) + 1) * scale }
        return Input(stream: Array(data[(1 + count)...]), chunkLengths: lengths)
    }

    /// The fuzz input that feeds `stream` in chunks of `chunkLengths` (each 1 to 256).
    static func fuzzData(stream: [UInt8], chunkLengths: [Int] = []) -> [UInt8] {
        precondition(chunkLengths.count <= 8 && chunkLengths.allSatisfy { (1...256).contains($0) })
        return [UInt8(chunkLengths.count)] + chunkLengths.map { UInt8($0 - 1) } + stream
    }

    /// The cut points of a stream of `count` bytes fed in chunks of `chunkLengths` (repeated):
    /// the end offset of every chunk, ascending, the last one `count`.
    static func cuts(count: Int, chunkLengths: [Int]) -> [Int] {
        let lengths = chunkLengths.filter { $0 > 0 }
        guard count > 0 else { return [] }
        guard !lengths.isEmpty else { return [count] }
        var cuts: [Int] = []
        var offset = 0
        var index = 0
        while offset < count {
            offset = min(count, offset + lengths[index % lengths.count])
            index += 1
            cuts.append(offset)
        }
        return cuts
    }

    // MARK: Checks

    /// Every problem found with one fuzz input; empty when the framer and the parser behave.
    static func problems(fuzzData data: [UInt8]) -> [String] {
        let input = input(fuzzData: data)
        return problems(stream: input.stream, cuts: cuts(count: input.stream.count, chunkLengths: input.chunkLengths))
    }

    /// Every problem found with `stream` arriving in chunks that end at `cuts`.
    static func problems(stream: [UInt8], cuts: [Int]) -> [String] {
        let expected = expectedEvents(stream: stream, cuts: cuts)
        var problems: [String] = []
        let framed = framerEvents(stream: stream, cuts: cuts, problems: &problems)
        if framed != expected {
            problems.append(
                "framer events differ from the reference for \(escaped(stream)) cut at \(shortened(cuts)):\n"
                    + "  framer:    \(framed)\n  reference: \(expected)"
            )
        }
        for event in expected {
            switch event {
            case .line(let line), .lastLine(let line): problems += requestProblems(line)
            case .partialLine, .tooLong: break
            }
        }
        return problems
    }

    /// What the parser does with one framed line, against the reference parser and the
    /// encoders: an empty array when all is well.
    static func requestProblems(_ line: [UInt8]) -> [String] {
        var problems: [String] = []
        var shown: String { escaped(line) }
        // Through a slice that does not start at index 0, like a buffer's view.
        let padded = [space] + line
        let parsed = RequestParser.parse(padded[1...])
        if RequestParser.parse(line) != parsed {
            problems.append("parse of \(shown) depends on the collection's indices")
        }
        // The agent's fast path must mean what the parser means, whenever it recognises a line.
        if let simple = line.withUnsafeBytes({ SimpleGet.recognise($0) }) {
            let fields = (
                kind: String(decoding: line[simple.kind], as: UTF8.self),
                id: String(decoding: line[simple.id], as: UTF8.self)
            )
            let fast = WireRequest.get(kind: fields.kind, id: fields.id, minValiditySeconds: simple.minValidity)
            if parsed != .success(fast) {
                problems.append("fast path reads \(shown) as \(fast), parser gives \(describe(parsed))")
            }
        }
        let reference = referenceParse(line)
        if Outcome(parsed) != reference {
            problems.append("parse of \(shown): parser gives \(describe(parsed)), protocol says \(reference)")
        }
        switch parsed {
        case .success(let request):
            let encoded = request.line
            if encoded.utf8.contains(where: { $0 == lf || $0 == cr }) {
                problems.append("\(request).line holds a line break: \(encoded.debugDescription)")
            }
            if RequestParser.parse(Array(encoded.utf8)) != .success(request) {
                problems.append(
                    "\(request) (from \(shown)) re-encoded as \(encoded.debugDescription) parses as "
                        + describe(RequestParser.parse(Array(encoded.utf8)))
                )
            }
            if RequestParser.parse(text: encoded) != .success(request) {
                problems.append("parse(text:) of \(encoded.debugDescription) is not \(request)")
            }
        case .failure(let error):
            if error.message.isEmpty
                || error.message.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
            {
                problems.append("error for \(shown) is not a non-empty one-line text: \(error)")
            }
            let reply = WireReply.error(error).line
            if reply.utf8.filter({ $0 == lf }).count != 1 || reply.utf8.last != lf {
                problems.append("error reply for \(shown) is not one line: \(reply.debugDescription)")
            } else if WireReply.parse(Substring(reply.dropLast())) != .error(error) {
                problems.append("error reply \(reply.debugDescription) does not parse back")
            }
        }
        return problems
    }

    // MARK: Reference framing

    /// What a stream decoder must report for `stream` arriving in chunks that end at `cuts`,
    /// worked out on the whole stream: LF-terminated lines of at most the limit (a CR before the
    /// LF not counted), a too-long line ending the framing, the rest a last line at end of input.
    /// A line gets a ``Event/partialLine`` first when a chunk ends inside it, while the framer can
    /// still wait for its LF.
    static func expectedEvents(stream: [UInt8], cuts: [Int]) -> [Event] {
        var events: [Event] = []
        // A partial line is reported when some chunk ends after its first byte and, at the
        // latest, at `waitEnd`, the last offset where the framer still waits for its LF.
        func reportPartial(from start: Int, waitEnd: Int) {
            // The first cut after `start` (cuts ascend), by binary search.
            var low = 0
            var high = cuts.count
            while low < high {
                let middle = (low + high) / 2
                if cuts[middle] <= start { low = middle + 1 } else { high = middle }
            }
            if low < cuts.count, cuts[low] <= waitEnd { events.append(.partialLine) }
        }
        var start = 0
        while start < stream.count {
            guard let newline = stream[start...].firstIndex(of: lf) else {
                if stream.count - start > limit + 1 {
                    reportPartial(from: start, waitEnd: start + limit + 1)
                    events.append(.tooLong)
                } else {
                    reportPartial(from: start, waitEnd: stream.count)
                    events.append(.lastLine(Array(stream[start...])))
                }
                return events
            }
            var contentEnd = newline
            if contentEnd > start, stream[contentEnd - 1] == cr { contentEnd -= 1 }
            if contentEnd - start > limit {
                reportPartial(from: start, waitEnd: min(newline, start + limit + 1))
                events.append(.tooLong)
                return events
            }
            reportPartial(from: start, waitEnd: newline)
            events.append(.line(Array(stream[start..<newline])))
            start = newline + 1
        }
        return events
    }

    /// Drives a ``LineFramer`` over `stream` as the agent's request framer does, chunk by chunk:
    /// its generic search and its search of bytes in memory (`memchr`) side by side, which must
    /// agree at every step.
    static func framerEvents(stream: [UInt8], cuts: [Int], problems: inout [String]) -> [Event] {
        var framer = LineFramer()
        var inMemory = LineFramer()
        var events: [Event] = []
        var start = 0
        var reported = false
        for received in cuts {
            framing: while true {
                let unconsumed = stream[start..<received]
                let step = framer.next(in: unconsumed)
                let stepInMemory = unconsumed.withUnsafeBytes { inMemory.next(in: $0) }
                if stepInMemory != step {
                    problems.append(
                        "memchr search says \(stepInMemory), generic \(step) for \(escaped(Array(unconsumed)))"
                    )
                    return events
                }
                switch step {
                case .line(let length):
                    guard length >= 0, start + length < received, stream[start + length] == lf else {
                        problems.append("framer says \(step) for \(escaped(Array(unconsumed)))")
                        return events
                    }
                    events.append(.line(Array(stream[start..<(start + length)])))
                    start += length + 1
                    reported = false
                case .tooLong:
                    events.append(.tooLong)
                    return events
                case .needMoreData(let pending):
                    if pending != unconsumed.count {
                        problems.append("framer says \(step) for \(unconsumed.count) unconsumed bytes")
                    }
                    if unconsumed.count > 0, !reported {
                        reported = true
                        events.append(.partialLine)
                    }
                    break framing
                }
            }
        }
        if start < stream.count {
            events.append(.lastLine(Array(stream[start...])))
            framer.reset()
        }
        return events
    }

    // MARK: Descriptions

    /// `bytes` as a Swift string literal: printable ASCII as is, everything else escaped.
    static func escaped(_ bytes: [UInt8]) -> String {
        var text = "\""
        let shown = bytes.count > 200 ? Array(bytes.prefix(80)) : bytes
        for byte in shown {
            switch byte {
            case 0x0A: text += "\\n"
            case 0x0D: text += "\\r"
            case 0x22: text += "\\\""
            case 0x5C: text += "\\\\"
            case 0x20...0x7E: text.unicodeScalars.append(Unicode.Scalar(byte))
            default: text += "\\x" + (byte < 0x10 ? "0" : "") + String(byte, radix: 16)
            }
        }
        if shown.count < bytes.count { text += "... (\(bytes.count) bytes)" }
        return text + "\""
    }

    private static func shortened(_ cuts: [Int]) -> String {
        cuts.count <= 24 ? "\(cuts)" : "\(Array(cuts.prefix(24)))... (\(cuts.count) chunks)"
    }

    private static func describe(_ result: Result<WireRequest, WireError>) -> String {
        switch result {
        case .success(let request): return "\(request)"
        case .failure(let error): return "ERR \(error.code.rawValue) \(error.message)"
        }
    }
}
