import Foundation
import _CryptoExtras

/// RS256 JWTs: signing and verifying compact JWS.
enum FakeJWT {
    /// `base64url(header).base64url(payload).base64url(signature)` with header
    /// `{"alg":"RS256","kid":keyID,"typ":"JWT"}`.
    static func sign(payload: [UInt8], key: FakeKey) throws -> String {
        let header = FakeJSON.encode(["alg": "RS256", "kid": key.keyID, "typ": "JWT"])
        let input = FakeJSON.base64URL(header) + "." + FakeJSON.base64URL(payload)
        let signature = try key.key.signature(for: Array(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + FakeJSON.base64URL(signature.rawRepresentation)
    }

    /// The claims of `jwt` when its header is RS256 with `kid` `keyID` (when given) and its
    /// signature verifies with `key`; else `nil`.
    static func verify(_ jwt: String, key: _RSA.Signing.PublicKey, keyID: String?) -> [String: Any]? {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3,
            let headerBytes = FakeJSON.base64URLDecode(parts[0]), let header = FakeJSON.object(headerBytes),
            header["alg"] as? String == "RS256", keyID == nil || header["kid"] as? String == keyID,
            let payload = FakeJSON.base64URLDecode(parts[1]), let claims = FakeJSON.object(payload),
            let signature = FakeJSON.base64URLDecode(parts[2])
        else { return nil }
        let input = Array("\(parts[0]).\(parts[1])".utf8)
        guard
            key.isValidSignature(
                _RSA.Signing.RSASignature(rawRepresentation: signature),
                for: input,
                padding: .insecurePKCS1v1_5
            )
        else { return nil }
        return claims
    }
}
