import Foundation

/// The few claims of a JWT the agent reads. No signature check: the agent is not the audience,
/// it only reads `exp` and `authorization` to bound caching and catch a token for the wrong id.
public struct JWTClaims: Sendable {
    /// The `exp` claim, if present and numeric.
    public var expiresAt: Double?
    /// The `iat` claim, if present and numeric.
    public var issuedAt: Double?
    /// The string values of the `authorization` claim object (`vehicleid`, `tripid`, ...).
    public var authorization: [String: String]

    /// Decodes the payload of a compact JWS; `nil` when `token` is not a JWT.
    public init?(token: String) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts[0].isEmpty, !parts[1].isEmpty,
            let header = Self.decodeObject(parts[0]), header["alg"] != nil,
            let payload = Self.decodeObject(parts[1])
        else { return nil }
        if let exp = payload["exp"] as? NSNumber, !(exp is Bool) {
            expiresAt = exp.doubleValue
        }
        if let iat = payload["iat"] as? NSNumber, !(iat is Bool) {
            issuedAt = iat.doubleValue
        }
        var authorization: [String: String] = [:]
        if let object = payload["authorization"] as? [String: Any] {
            for (name, value) in object {
                if let text = value as? String { authorization[name.lowercased()] = text }
            }
        }
        self.authorization = authorization
    }

    /// Decodes unpadded base64url text.
    public static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64.append("=") }
        return Data(base64Encoded: base64)
    }

    /// Encodes bytes as unpadded base64url text.
    public static func base64URLEncode(_ data: some Sequence<UInt8>) -> String {
        Data(data).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private static func decodeObject(_ part: Substring) -> [String: Any]? {
        guard let data = base64URLDecode(part),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return nil }
        return object
    }
}
