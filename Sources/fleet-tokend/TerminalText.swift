/// Text from the agent (or whatever answers on its socket), made safe to print to a terminal.
enum TerminalText {
    /// `text` with everything but printable ASCII escaped, so no byte of it can move the cursor,
    /// set a window title, clear the screen or start a line of its own: a backslash as `\\`, LF,
    /// CR and tab as `\n`, `\r` and `\t`, other control characters as `\x1b`, and anything beyond
    /// ASCII as `\u{202e}`.
    static func escaped(_ text: String) -> String {
        guard text.utf8.contains(where: { $0 < 0x20 || $0 > 0x7E || $0 == UInt8(ascii: "\\") }) else { return text }
        var escaped = ""
        for scalar in text.unicodeScalars {
            switch scalar.value {
            case 0x5C: escaped += "\\\\"
            case 0x0A: escaped += "\\n"
            case 0x0D: escaped += "\\r"
            case 0x09: escaped += "\\t"
            case 0x20...0x7E: escaped.unicodeScalars.append(scalar)
            case 0..<0x80: escaped += "\\x" + hex(scalar.value, digits: 2)
            default: escaped += "\\u{" + hex(scalar.value, digits: 1) + "}"
            }
        }
        return escaped
    }

    /// `text` cut or filled with spaces to `width` UTF-16 code units (characters, for the
    /// printable ASCII ``escaped(_:)`` makes): a column of a table.
    static func padded(_ text: String, to width: Int) -> String {
        let units = text.utf16
        if units.count >= width { return String(decoding: units.prefix(width), as: UTF16.self) }
        return text + String(repeating: " ", count: width - units.count)
    }

    private static func hex(_ value: UInt32, digits: Int) -> String {
        let text = String(value, radix: 16)
        return String(repeating: "0", count: max(0, digits - text.count)) + text
    }
}
