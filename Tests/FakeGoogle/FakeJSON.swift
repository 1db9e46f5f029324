import Foundation

/// JSON and base64url helpers of the fake (it depends on no agent code).
enum FakeJSON {
    /// `object` as compact JSON, keys sorted, slashes unescaped.
    static func encode(_ object: Any) -> [UInt8] {
        Array(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
    }

    /// The JSON object in `bytes`, or `nil`.
    static func object(_ bytes: some Collection<UInt8>) -> [String: Any]? {
        try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
    }

    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64)
    }

    /// `count` random bytes as lower-case hex.
    static func randomHex(_ count: Int) -> String {
        (0..<count).map { _ in
            let byte = UInt8.random(in: 0...255)
            return (byte < 16 ? "0" : "") + String(byte, radix: 16)
        }.joined()
    }

    /// A random base64url string of `count` random bytes.
    static func randomToken(_ count: Int) -> String {
        base64URL((0..<count).map { _ in UInt8.random(in: 0...255) })
    }

    /// The fields of an `application/x-www-form-urlencoded` body.
    static func form(_ bytes: [UInt8]) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in String(decoding: bytes, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ part: Substring) -> String {
                part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(part)
            }
            fields[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return fields
    }
}
