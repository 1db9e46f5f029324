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

    /// Reads `bytes` as one JSON value; `nil` when they are not exactly that.
    public init?(bytes: some Collection<UInt8>) {
        let array = Array(bytes)
        var reader = Reader(bytes: array)
        guard let value = reader.value(depth: 0) else { return nil }
        reader.skipWhitespace()
        guard reader.index == array.count else { return nil }
        self = value
    }

    /// The members of an object, `nil` for any other value.
    public var members: [Member]? {
        if case .object(let members) = self { return members }
        return nil
    }

    private struct Reader {
        let bytes: [UInt8]
        var index = 0

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
                guard let run = String(validating: bytes[runStart..<end], as: UTF8.self) else { return false }
                scalars.append(contentsOf: run.unicodeScalars)
                return true
            }
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\""), !escaped {
                    guard let text = String(validating: bytes[runStart..<index], as: UTF8.self) else { return nil }
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

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    }
}
