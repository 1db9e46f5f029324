/// The one JSON string writer, beside ``StrictJSON``, the one reader: the metadata endpoint's
/// answers and the AWS subject token of Workload Identity Federation.
public enum JSONString {
    /// `text` as a JSON string literal, quotes included (RFC 8259, section 7): `"` and `\`
    /// escaped, LF, CR and tab as `\n`, `\r` and `\t`, and as `\uXXXX` (lower-case hex digits, a
    /// UTF-16 unit each) every other control character, DEL, U+2028 and U+2029 (line ends to
    /// JavaScript) and, with `asciiOnly`, every character past `~`, as Python's `json.dumps`
    /// writes them by default.
    public static func quoted(_ text: String, asciiOnly: Bool = false) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _
            where scalar.value < 0x20 || scalar.value == 0x7F || scalar.value == 0x2028 || scalar.value == 0x2029
                || (asciiOnly && scalar.value > 0x7E):
                for unit in String(scalar).utf16 {
                    let hex = String(unit, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                }
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
