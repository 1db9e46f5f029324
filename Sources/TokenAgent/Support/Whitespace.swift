/// Trimming the blanks around a header value, a `Cache-Control` directive or a reply body:
/// Unicode's space separators (category Zs), tab and U+200B (zero width space), which is the
/// set Foundation calls `CharacterSet.whitespaces`; with line breaks (U+000A to U+000D, U+0085
/// and categories Zl and Zp) its `whitespacesAndNewlines`. Unicode scalars are trimmed one by
/// one, so a combining mark after a space stays.
extension StringProtocol {
    /// The text without blanks (spaces and tabs) at either end.
    func trimmingWhitespace() -> String {
        trimming(while: Self.isWhitespace)
    }

    /// The text without blanks and line breaks at either end.
    func trimmingWhitespaceAndNewlines() -> String {
        trimming { Self.isWhitespace($0) || Self.isNewline($0) }
    }

    private func trimming(while trimmed: (Unicode.Scalar) -> Bool) -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !trimmed($0) }),
            let last = scalars.lastIndex(where: { !trimmed($0) })
        else { return "" }
        var kept = String.UnicodeScalarView()
        kept.append(contentsOf: scalars[first...last])
        return String(kept)
    }

    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "\t" || scalar == "\u{200B}" || scalar.properties.generalCategory == .spaceSeparator
    }

    private static func isNewline(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A...0x0D, 0x85: return true
        default:
            let category = scalar.properties.generalCategory
            return category == .lineSeparator || category == .paragraphSeparator
        }
    }
}
