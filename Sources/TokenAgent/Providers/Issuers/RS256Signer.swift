import _CryptoExtras

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The one way the agent signs a JWT itself: RS256 (RSASSA-PKCS1-v1_5 with SHA-256), for the local
/// issuers' Fleet Engine tokens (``LocalIssuer``) and a service-account key file's JWT-bearer
/// assertions alike.
///
/// The token is `header.claims.signature`, each part unpadded base64url: the header
/// `{"alg":"RS256","kid":<keyID>,"typ":"JWT"}` and the claims as compact JSON
/// (``compactJSON(_:)``), and the signature of the first two parts as they are written.
struct RS256Signer: Sendable {
    /// The private key.
    let key: _RSA.Signing.PrivateKey
    /// The key's id, written as the header's `kid`.
    let keyID: String

    /// `claims`, signed.
    func token(claims: some Encodable) throws -> String {
        let header = ["alg": "RS256", "typ": "JWT", "kid": keyID]
        let signingInput =
            JWTClaims.base64URLEncode(try Self.compactJSON(header)) + "."
            + JWTClaims.base64URLEncode(try Self.compactJSON(claims))
        let signature = try key.signature(for: Array(signingInput.utf8), padding: .insecurePKCS1v1_5)
        return signingInput + "." + JWTClaims.base64URLEncode(signature.rawRepresentation)
    }

    /// `value` as compact JSON, keys sorted and `/` unescaped: the bytes every issuer signs or
    /// has signed (``IssuedClaims/json()`` is what IAM `signJwt` is sent).
    static func compactJSON(_ value: some Encodable) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(value)
    }
}
