import TokenWire

/// A `signJwt` reply (`{"keyId": ..., "signedJwt": ...}`), checked whole before its token is kept:
/// what IAM signed must be exactly what was asked for, under exactly the header Google's signer
/// writes, with a signature of the right length. Anything else is the signer's fault
/// (``ProviderError/failed(_:)``, named), never cached or served.
///
/// - The reply is a strict-JSON object (``IAMCredentialsReply``: no name twice at any depth) with
///   a `keyId` and a `signedJwt`, both strings (other members are Google's to add and are ignored).
/// - The token is 1 to 16 KiB of printable ASCII in three parts, each strict base64url
///   (``StrictBase64URL``).
/// - The header is a strict-JSON object of exactly `alg: "RS256"`, `typ: "JWT"` and a `kid` equal
///   to the reply's `keyId`, each once; any other member (`jku`, `x5u`, `jwk`, `crit`, ...) is
///   refused by name.
/// - The signature decodes to ``signatureBytes`` bytes, the modulus length of Google's 2048-bit
///   RSA keys; an empty or short signature is refused.
struct SignJWTReply {
    /// The length of an RS256 signature by a 2048-bit key (every Google-managed service-account
    /// key), bytes.
    static let signatureBytes = 256

    /// The reply's `keyId`: the key that signed.
    var keyID: String
    /// The signed JWT.
    var token: String
    /// The JWT's payload, decoded (the claims, for the caller to compare with those asked for).
    var payload: [UInt8]

    /// Reads `body`, throwing ``ProviderError/failed(_:)`` naming what is wrong.
    init(body: [UInt8]) throws(ProviderError) {
        let reply = try IAMCredentialsReply(body: body, method: .signJwt)
        let token = try reply.string("signedJwt")
        let keyID = try reply.string("keyId")
        guard !keyID.isEmpty else { throw Self.fault("reply's keyId is empty") }
        guard !token.isEmpty, token.utf8.count <= TokenAcceptance.maxTokenBytes,
            token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw Self.fault("reply's token is empty, too long, or not printable ASCII")
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw Self.fault("returned a token that is not a signed JWT (three parts)") }
        guard let header = StrictBase64URL.decode(parts[0]), let members = StrictJSON(bytes: header)?.members else {
            throw Self.fault("returned a token whose header is not strict base64url JSON")
        }
        try Self.check(header: members, keyID: keyID)
        guard let signature = StrictBase64URL.decode(parts[2]) else {
            throw Self.fault("returned a token whose signature is not strict base64url")
        }
        guard signature.count == Self.signatureBytes else {
            throw Self.fault(
                "returned a token whose signature is \(signature.count) bytes, not \(Self.signatureBytes) (RS256, 2048-bit key)"
            )
        }
        guard let payload = StrictBase64URL.decode(parts[1]) else {
            throw Self.fault("returned a token whose claims are not those asked for")
        }
        self.keyID = keyID
        self.token = token
        self.payload = payload
    }

    /// Refuses a header that is not exactly `{"alg":"RS256","typ":"JWT","kid":keyID}` in some order.
    private static func check(header: [StrictJSON.Member], keyID: String) throws(ProviderError) {
        var seen: Set<String> = []
        for member in header {
            let name = JWTClaims.printable(member.name)
            guard ["alg", "typ", "kid"].contains(where: { $0.utf8.elementsEqual(member.name.utf8) }) else {
                throw fault("returned a token whose header carries \(name) (only alg, typ and kid are accepted)")
            }
            guard seen.insert(member.name).inserted else {
                throw fault("returned a token whose header gives \(name) twice")
            }
            guard case .string(let value) = member.value else {
                throw fault("returned a token whose header's \(name) is not a string")
            }
            switch member.name {
            case "alg" where !value.utf8.elementsEqual("RS256".utf8):
                throw fault("returned a token whose header's alg is \(JWTClaims.printable(value)), not RS256")
            case "typ" where !value.utf8.elementsEqual("JWT".utf8):
                throw fault("returned a token whose header's typ is \(JWTClaims.printable(value)), not JWT")
            case "kid" where !value.utf8.elementsEqual(keyID.utf8):
                throw fault("returned a token whose header's kid is not the reply's keyId")
            default:
                continue
            }
        }
        for name in ["alg", "typ", "kid"] where !seen.contains(name) {
            throw fault("returned a token whose header has no \(name)")
        }
    }

    private static func fault(_ text: String) -> ProviderError { IAMCredentialsCall.Method.signJwt.fault(text) }
}
