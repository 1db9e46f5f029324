import Foundation

/// A file of extra request headers for a provider: one `Name: value` a line; blank lines and lines
/// starting with `#` are skipped. The values are secrets: they are never logged.
public enum HeadersFile {
    /// Parses header lines. `key` names the setting in errors.
    public static func parse(_ text: String, key: String) throws -> [(String, String)] {
        var headers: [(String, String)] = []
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty || line.hasPrefix("#") { continue }
            guard let colon = line.firstIndex(of: ":") else {
                throw ConfigurationError(key: key, "line \(number + 1) is not 'Name: value'")
            }
            let name = line[..<colon].trimmingCharacters(in: .whitespaces)
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            let tokenCharacters = CharacterSet(
                charactersIn: "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
            )
            guard !name.isEmpty, name.unicodeScalars.allSatisfy(tokenCharacters.contains) else {
                throw ConfigurationError(key: key, "line \(number + 1) has an invalid header name")
            }
            guard !value.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else {
                throw ConfigurationError(key: key, "line \(number + 1) has a control character in its value")
            }
            headers.append((name, value))
        }
        return headers
    }
}
