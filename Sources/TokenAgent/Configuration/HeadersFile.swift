/// A file of extra request headers for a provider: one `Name: value` a line; blank lines and lines
/// starting with `#` are skipped. The values are secrets: they are never logged.
public enum HeadersFile {
    /// Parses header lines. `key` names the setting in errors.
    public static func parse(_ text: String, key: String) throws -> [(String, String)] {
        var headers: [(String, String)] = []
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingWhitespaceAndNewlines()
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let colon = line.firstIndex(of: ":") else {
                throw ConfigurationError(key: key, "line \(number + 1) is not 'Name: value'")
            }
            let name = line[..<colon].trimmingWhitespace()
            let value = line[line.index(after: colon)...].trimmingWhitespace()
            guard !name.isEmpty, name.utf8.allSatisfy(isTokenCharacter) else {
                throw ConfigurationError(key: key, "line \(number + 1) has an invalid header name")
            }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw ConfigurationError(key: key, "line \(number + 1) has a control character in its value")
            }
            headers.append((name, value))
        }
        return headers
    }

    /// Whether `byte` may be in a header name: RFC 9110's `tchar`, letters, digits and
    /// ``!#$%&'*+-.^_`|~``.
    private static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
