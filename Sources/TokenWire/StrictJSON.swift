/// A JSON value read strictly, keeping what a lenient reader hides: an object's members in order,
/// duplicates included, so a caller can refuse `{"vehicleid": "a", "vehicleid": "b"}` instead of
/// silently taking one of them (Foundation's `JSONSerialization` keeps the last).
///
/// It reads RFC 8259 JSON and nothing more: no comments, no trailing commas, no unescaped control
/// characters in strings, no lone surrogates, valid UTF-8 only, at most ``maxDepth`` levels of
/// nesting. A number is kept as a `Double`; one too large for it is infinite, and the caller
/// decides what that means.
public indirect enum StrictJSON: Sendable, Equatable {
    case object([Member])
    case array([StrictJSON])
    case string(String)
    case number(Double)
    case bool(Bool)
    case null

    /// One member of an object.
    public struct Member: Sendable, Equatable {
        /// The member's name, escapes resolved.
        public var name: String
        /// Its value.
        public var value: StrictJSON

        /// A member named `name` with `value`.
        public init(name: String, value: StrictJSON) {
            self.name = name
            self.value = value
        }
    }

    /// The deepest nesting of arrays and objects read.
    public static let maxDepth = 32

    /// The first name given twice among `members` (one object's, in the order written), or `nil`.
    /// The one rule for names given twice, in the agent and in the client: names are compared as
    /// Swift strings, so two spellings of one name (`K` and the Kelvin sign, a precomposed `é`
    /// and `e` with its accent), which some readers take for one member and others for two, count
    /// as the same name; which of two values counts depends on the reader, so neither is taken.
    public static func firstRepeatedName(in members: [Member]) -> String? {
        var seen: Set<String> = []
        seen.reserveCapacity(members.count)
        for member in members where !seen.insert(member.name).inserted { return member.name }
        return nil
    }

    /// Reads `bytes` as one JSON value; `nil` when they are not exactly that.
    public init?(bytes: some Collection<UInt8>) {
        guard case .success(let value) = Self.parse(bytes: bytes) else { return nil }
        self = value
    }

    /// Where and why `bytes` are not one JSON value: for a message that points at the mistake
    /// (`line 3, column 1: unexpected '}'`) in a file a person wrote.
    public struct SyntaxError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The byte offset the reader stopped at, from 0.
        public var offset: Int
        /// The line of ``offset``, from 1 (LF ends a line).
        public var line: Int
        /// The column of ``offset`` in characters (Unicode scalars), from 1.
        public var column: Int
        /// What was found there: `'}'`, `end of input`, `a control character`, or
        /// `a byte that is not UTF-8`.
        public var found: String

        /// `line 3, column 1: unexpected '}'`.
        public var description: String { "\(position): unexpected \(found)" }

        /// `line 3, column 1`, without what was found there: for a file that holds a secret,
        /// where even one character of it stays out of messages.
        public var position: String { "line \(line), column \(column)" }

        init(bytes: [UInt8], offset: Int) {
            let offset = min(offset, bytes.count)
            self.offset = offset
            var line = 1
            var lineStart = 0
            for index in 0..<offset where bytes[index] == 0x0A {
                line += 1
                lineStart = index + 1
            }
            self.line = line
            // Continuation bytes do not start a character.
            self.column = 1 + bytes[lineStart..<offset].count { $0 & 0xC0 != 0x80 }
            if offset == bytes.count {
                found = "end of input"
            } else {
                let byte = bytes[offset]
                switch byte {
                case 0x20..<0x7F: found = "'\(Character(Unicode.Scalar(byte)))'"
                case 0..<0x20, 0x7F: found = "a control character"
                default:
                    // A character of several bytes, shown when it is valid UTF-8.
                    let end = min(bytes.count, offset + 4)
                    let scalar = (offset + 1...end).lazy.compactMap {
                        String(validating: bytes[offset..<$0], as: UTF8.self)
                    }.first
                    found = scalar.map { "'\($0)'" } ?? "a byte that is not UTF-8"
                }
            }
        }
    }

    /// Reads `bytes` as one JSON value, or says where the reading stopped: the first byte that
    /// cannot continue a JSON text (a trailing comma's closing bracket, a missing quote's end of
    /// input, text after the value).
    public static func parse(bytes: some Collection<UInt8>) -> Result<StrictJSON, SyntaxError> {
        let array = Array(bytes)
        var reader = Reader(bytes: array)
        guard let value = reader.value(depth: 0) else {
            return .failure(SyntaxError(bytes: array, offset: reader.failure ?? reader.index))
        }
        reader.skipWhitespace()
        guard reader.index == array.count else { return .failure(SyntaxError(bytes: array, offset: reader.index)) }
        return .success(value)
    }

    /// The members of an object, `nil` for any other value.
    public var members: [Member]? {
        if case .object(let members) = self { return members }
        return nil
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0
        /// Where a string or number went wrong, when that is not ``index`` (which a failed
        /// string or number may leave at its start).
        var failure: Int?

        mutating func skipWhitespace() {
            while index < bytes.count,
                bytes[index] == 0x20 || bytes[index] == 0x09 || bytes[index] == 0x0A
                    || bytes[index] == 0x0D
            {
                index += 1
            }
        }

        mutating func value(depth: Int) -> StrictJSON? {
            skipWhitespace()
            guard index < bytes.count else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "{"): return depth < StrictJSON.maxDepth ? object(depth: depth + 1) : nil
            case UInt8(ascii: "["): return depth < StrictJSON.maxDepth ? array(depth: depth + 1) : nil
            case UInt8(ascii: "\""): return string().map(StrictJSON.string)
            case UInt8(ascii: "t"): return literal("true", .bool(true))
            case UInt8(ascii: "f"): return literal("false", .bool(false))
            case UInt8(ascii: "n"): return literal("null", .null)
            default: return number()
            }
        }

        mutating func object(depth: Int) -> StrictJSON? {
            index += 1
            var members: [Member] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let name = string() else { return nil }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                guard let value = value(depth: depth) else { return nil }
                members.append(Member(name: name, value: value))
                skipWhitespace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                } else {
                    return nil
                }
            }
        }

        mutating func array(depth: Int) -> StrictJSON? {
            index += 1
            var elements: [StrictJSON] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                guard let element = value(depth: depth) else { return nil }
                elements.append(element)
                skipWhitespace()
                guard index < bytes.count else { return nil }
                if bytes[index] == UInt8(ascii: ",") {
                    index += 1
                } else if bytes[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(elements)
                } else {
                    return nil
                }
            }
        }

        mutating func literal(_ text: StaticString, _ value: StrictJSON) -> StrictJSON? {
            let count = text.utf8CodeUnitCount
            guard bytes.count - index >= count else { return nil }
            let matches = text.withUTF8Buffer { expected in
                expected.indices.allSatisfy { bytes[index + $0] == expected[$0] }
            }
            guard matches else { return nil }
            index += count
            return value
        }

        /// `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`
        mutating func number() -> StrictJSON? {
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { return nil }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
            } else {
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                index += 1
                guard index < bytes.count, isDigit(bytes[index]) else { return nil }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                    index += 1
                }
                guard index < bytes.count, isDigit(bytes[index]) else { return nil }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            // Grammar-checked above, so Double's parser sees only JSON numbers (never "nan" or
            // "inf"); a huge exponent reads as infinity.
            guard let value = Double(String(decoding: bytes[start..<index], as: UTF8.self)) else { return nil }
            return .number(value)
        }

        mutating func string() -> String? {
            index += 1
            var scalars = String.UnicodeScalarView()
            var runStart = index
            // Whether an escape came: without one (the common case, every string of a JWT's
            // payload the agent makes) the string is its bytes, validated once, with no detour
            // through a scalar view (a cache file's adoption reads 100,000 payloads at start).
            var escaped = false
            func flushRun(to end: Int, into scalars: inout String.UnicodeScalarView) -> Bool {
                guard runStart < end else { return true }
                guard let run = String(validating: bytes[runStart..<end], as: UTF8.self) else {
                    failure = firstInvalidUTF8(runStart..<end)
                    return false
                }
                scalars.append(contentsOf: run.unicodeScalars)
                return true
            }
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\""), !escaped {
                    guard let text = String(validating: bytes[runStart..<index], as: UTF8.self) else {
                        failure = firstInvalidUTF8(runStart..<index)
                        return nil
                    }
                    index += 1
                    return text
                }
                if byte == UInt8(ascii: "\"") {
                    guard flushRun(to: index, into: &scalars) else { return nil }
                    index += 1
                    return String(scalars)
                }
                if byte < 0x20 { return nil }
                if byte != UInt8(ascii: "\\") {
                    index += 1
                    continue
                }
                guard flushRun(to: index, into: &scalars) else { return nil }
                escaped = true
                index += 1
                guard index < bytes.count else { return nil }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    guard let scalar = unicodeEscape() else { return nil }
                    scalars.append(scalar)
                default: return nil
                }
                runStart = index
            }
            return nil
        }

        /// The scalar of `XXXX` (after `\u`), or of a surrogate pair `XXXX\uYYYY`; `nil` for a
        /// lone surrogate.
        mutating func unicodeEscape() -> Unicode.Scalar? {
            guard let high = hex4() else { return nil }
            if (0xD800...0xDBFF).contains(high) {
                guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"),
                    bytes[index + 1] == UInt8(ascii: "u")
                else { return nil }
                index += 2
                guard let low = hex4(), (0xDC00...0xDFFF).contains(low) else { return nil }
                return Unicode.Scalar(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
            }
            return Unicode.Scalar(high)
        }

        mutating func hex4() -> UInt32? {
            guard bytes.count - index >= 4 else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt32
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
                default: return nil
                }
                value = value << 4 | digit
                index += 1
            }
            return value
        }

        /// The offset of the first byte in `range` that does not continue valid UTF-8.
        func firstInvalidUTF8(_ range: Range<Int>) -> Int {
            var iterator = bytes[range].makeIterator()
            var parser = Unicode.UTF8.ForwardParser()
            var offset = range.lowerBound
            while true {
                switch parser.parseScalar(from: &iterator) {
                case .valid(let scalar): offset += scalar.count
                case .emptyInput: return range.upperBound
                case .error: return offset
                }
            }
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    }
}
