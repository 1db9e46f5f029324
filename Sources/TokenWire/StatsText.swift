/// A text of many words in one `STATS` field (`reload_error=configuration%20key%20…`): STATS
/// separates fields with spaces and names from values with the first `=`, so the text goes
/// percent-encoded, as a URL's query would carry it.
public enum StatsText {
    /// The most bytes of text a field carries; a longer text is cut at a character's end and
    /// ends with `...`.
    public static let maxBytes = 400

    /// `text` with every byte outside printable ASCII, and space, `%` and `=`, written `%XX`; at
    /// most ``maxBytes`` bytes of it. Control characters (and so any terminal escape) never
    /// reach a reader as themselves.
    public static func encode(_ text: String) -> String {
        var source = Array(text.utf8)
        if source.count > maxBytes {
            var end = maxBytes - 3
            // Not in the middle of a character: back to a byte that starts one.
            while end > 0, source[end] & 0xC0 == 0x80 { end -= 1 }
            source = Array(source[..<end]) + Array("...".utf8)
        }
        let hex = Array("0123456789ABCDEF".utf8)
        var encoded: [UInt8] = []
        encoded.reserveCapacity(source.count)
        for byte in source {
            if byte > 0x20, byte < 0x7F, byte != UInt8(ascii: "%"), byte != UInt8(ascii: "=") {
                encoded.append(byte)
            } else {
                encoded += [UInt8(ascii: "%"), hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            }
        }
        return String(decoding: encoded, as: UTF8.self)
    }

    /// The text of an ``encode(_:)``d field; `nil` when it is not one (a `%` without two hex
    /// digits). Control characters decoded are shown as `?`, so a field from an agent of another
    /// version cannot move a terminal's cursor either.
    public static func decode(_ field: String) -> String? {
        var bytes: [UInt8] = []
        var iterator = field.utf8.makeIterator()
        func hexValue(_ byte: UInt8?) -> UInt8? {
            switch byte {
            case let byte? where byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"): byte - UInt8(ascii: "0")
            case let byte? where byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
            case let byte? where byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
            default: nil
            }
        }
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = hexValue(iterator.next()), let low = hexValue(iterator.next()) else { return nil }
            let decoded = high << 4 | low
            bytes.append(decoded < 0x20 || decoded == 0x7F ? UInt8(ascii: "?") : decoded)
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
