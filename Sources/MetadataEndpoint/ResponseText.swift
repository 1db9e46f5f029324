import TokenWire

/// Text put into answers: JSON strings (``JSONString``), and what came from a request, made safe
/// to echo.
enum ResponseText {
    /// The longest part of a request echoed in an answer, in bytes before escaping.
    static let echoLimit = 200

    /// `text` as a JSON string literal, quotes included.
    static func json(_ text: String) -> String { JSONString.quoted(text) }

    /// `strings` as a JSON array.
    static func json(_ strings: [String]) -> String {
        "[" + strings.map { JSONString.quoted($0) }.joined(separator: ",") + "]"
    }

    /// Part of a request (a path, a scope) for an answer's text: at most ``echoLimit`` bytes, then
    /// `...`; every byte outside printable ASCII, and `<>&"'\` and `%`, as `%XX`, so the echo is
    /// one line of inert ASCII whatever was sent.
    static func echo(_ text: some StringProtocol) -> String {
        let bytes = Array(text.utf8)
        var out = ""
        for byte in bytes.prefix(echoLimit) {
            if byte > 0x20 && byte < 0x7F && !"<>&\"'\\%`".utf8.contains(byte) {
                out.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                out += "%" + (hex.count == 1 ? "0" : "") + hex
            }
        }
        return bytes.count > echoLimit ? out + "..." : out
    }
}
