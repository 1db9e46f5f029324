/// A text carried as one `STATS` value (`name=value`, fields split at spaces): every byte that is
/// not printable ASCII (`!` to `~`), and `%` itself, written `%XX` (upper-case hex), so a path
/// with a space or a line break stays one field and reads back as it was; `-` stands for none.
public enum StatsWord {
    /// The value that stands for no text.
    public static let none = "-"

    /// `text` as one field value; ``none`` for `nil` (and `%2D` for a text that is `-` itself).
    public static func encode(_ text: String?) -> String {
        guard let text else { return none }
        guard text != none else { return "%2D" }
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        let hex = Array("0123456789ABCDEF".utf8)
        for byte in text.utf8 {
            if byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "%") {
                out.append(byte)
            } else {
                out += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The text a field value stands for: `nil` for ``none``; `%XX` read back as its byte (a `%`
    /// not followed by two hex digits stays as it is). Bytes that are not UTF-8 come back as
    /// U+FFFD.
    public static func decode(_ value: String) -> String? {
        guard value != none else { return nil }
        let bytes = Array(value.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                out.append(high << 4 | low)
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
