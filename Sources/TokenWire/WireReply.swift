/// A reply line of protocol v1.
public enum WireReply: Sendable, Hashable {
    /// `OK <token> <expires-at>`: the reply to GET and REFRESH.
    case token(String, expiresAt: Int64)
    /// `OK` with optional text: the reply to DROP (no text), STATS and HELP.
    case ok(String)
    /// `PONG`.
    case pong
    /// `ERR <code> <text>`.
    case error(WireError)

    /// The reply as one line, LF included.
    public var line: String {
        switch self {
        case .token(let token, let expiresAt): return "OK \(token) \(expiresAt)\n"
        case .ok(let text): return text.isEmpty ? "OK\n" : "OK \(Self.oneLine(text))\n"
        case .pong: return "PONG\n"
        case .error(let error): return "ERR \(error.code.rawValue) \(Self.oneLine(error.message))\n"
        }
    }

    /// Parses a reply line (without its LF; a trailing CR is dropped). `OK` replies with exactly
    /// two fields whose second is an integer are read as ``token(_:expiresAt:)``.
    public static func parse(_ line: Substring) -> WireReply? {
        var line = line
        if line.last == "\r" { line = line.dropLast() }
        if line == "PONG" { return .pong }
        if line == "OK" { return .ok("") }
        if line.hasPrefix("OK ") {
            let rest = line.dropFirst(3)
            let fields = rest.split(separator: " ", omittingEmptySubsequences: false)
            if fields.count == 2, !fields[0].isEmpty, !fields[0].contains("="), let expiresAt = Int64(fields[1]) {
                return .token(String(fields[0]), expiresAt: expiresAt)
            }
            return .ok(String(rest))
        }
        if line.hasPrefix("ERR ") {
            let rest = line.dropFirst(4)
            let codeText = rest.prefix { $0 != " " }
            guard let code = WireErrorCode(rawValue: String(codeText)) else { return nil }
            let message = rest.dropFirst(codeText.count).drop { $0 == " " }
            return .error(WireError(code, String(message)))
        }
        return nil
    }

    /// Replaces line breaks and other control characters (Unicode's `Cc`: U+0000-U+001F and
    /// U+007F-U+009F) with spaces so a text stays on one line.
    ///
    /// The check runs over the UTF-8 bytes (a `STATS` reply is rendered for every request, and a
    /// scalar's general category costs a table lookup each): a `Cc` scalar is one byte under
    /// 0x20, 0x7F, or 0xC2 followed by 0x80-0x9F.
    public static func oneLine(_ text: String) -> String {
        var text = text
        let clean = text.withUTF8 { bytes -> Bool in
            var index = 0
            while index < bytes.count {
                let byte = bytes[index]
                if byte < 0x20 || byte == 0x7F { return false }
                if byte == 0xC2, index + 1 < bytes.count, (0x80...0x9F).contains(bytes[index + 1]) { return false }
                index += 1
            }
            return true
        }
        guard !clean else { return text }
        return String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }
            )
        )
    }
}

extension WireReply {
    /// Parses the `name=value` fields of a STATS reply text.
    public static func statsFields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for field in text.split(separator: " ") {
            guard let eq = field.firstIndex(of: "=") else { continue }
            fields[String(field[..<eq])] = String(field[field.index(after: eq)...])
        }
        return fields
    }
}
