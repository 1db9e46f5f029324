/// A request target taken apart: its path's segments and its query's parameters, both
/// percent-decoded.
struct RequestTarget: Sendable {
    /// The path's segments between slashes, decoded: `/a/b/` is `["a", "b", ""]`, `/` is `[""]`.
    var segments: [String]
    /// The query's parameters in order, decoded (`+` as a space).
    var parameters: [(name: String, value: String)]
    /// The authority of an absolute-form target (`http://host:port/path`), if it was one.
    var authority: Substring?

    /// Parses an origin-form (`/path?query`) or absolute-form (`http://host:port/path?query`,
    /// RFC 9112 section 3.2.2) target; `nil` for anything else (`*`, an authority alone, a
    /// malformed escape).
    init?(_ target: String) {
        var rest = Substring(target)
        if let fragment = rest.firstIndex(of: "#") { rest = rest[..<fragment] }
        if !rest.hasPrefix("/") {
            guard let separator = rest.firstRange(of: "://") else { return nil }
            let scheme = rest[..<separator.lowerBound].lowercased()
            guard scheme == "http" || scheme == "https" else { return nil }
            let afterScheme = rest[separator.upperBound...]
            let pathStart = afterScheme.firstIndex { $0 == "/" || $0 == "?" } ?? afterScheme.endIndex
            authority = afterScheme[..<pathStart]
            rest = afterScheme[pathStart...]
            if !rest.hasPrefix("/") { rest = "/" + rest }
        }
        let queryStart = rest.firstIndex(of: "?")
        let path = queryStart.map { rest[..<$0] } ?? rest
        var segments: [String] = []
        for segment in path.dropFirst().split(separator: "/", omittingEmptySubsequences: false) {
            guard let decoded = Self.percentDecoded(segment, plusIsSpace: false) else { return nil }
            segments.append(decoded)
        }
        self.segments = segments
        var parameters: [(name: String, value: String)] = []
        if let queryStart {
            for pair in rest[rest.index(after: queryStart)...].split(separator: "&") {
                let equals = pair.firstIndex(of: "=")
                guard let name = Self.percentDecoded(equals.map { pair[..<$0] } ?? pair, plusIsSpace: true),
                    let value = Self.percentDecoded(
                        equals.map { pair[pair.index(after: $0)...] } ?? "",
                        plusIsSpace: true
                    )
                else { return nil }
                parameters.append((name, value))
            }
        }
        self.parameters = parameters
    }

    /// The values of parameter `name`, in order.
    func values(of name: String) -> [String] { parameters.filter { $0.name == name }.map(\.value) }

    /// Whether parameter `name` is given as `true` (any case), as in `recursive=true`.
    func isTrue(_ name: String) -> Bool { values(of: name).contains { $0.lowercased() == "true" } }

    /// `text` with `%XX` escapes decoded (and `+` as a space with `plusIsSpace`); `nil` for a
    /// malformed escape or bytes that are not UTF-8.
    static func percentDecoded(_ text: Substring, plusIsSpace: Bool) -> String? {
        var bytes: [UInt8] = []
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            switch byte {
            case UInt8(ascii: "%"):
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            case UInt8(ascii: "+") where plusIsSpace: bytes.append(UInt8(ascii: " "))
            default: bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
