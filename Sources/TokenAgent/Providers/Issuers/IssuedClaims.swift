#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The claims every issuer writes: `iss` and `sub` = the signing account, `aud` = Fleet Engine,
/// `iat` from our clock, `exp` = `iat` + lifetime, and the kind's `authorization`.
struct IssuedClaims: Codable, Hashable {
    var iss: String
    var sub: String
    var aud: String
    var iat: Int64
    var exp: Int64
    var authorization: [String: String]

    /// The claims of a token signed as `email` at `now` (whole seconds, rounded down).
    init(email: String, now: Double, lifetime: Double, authorization: [String: String]) {
        iss = email
        sub = email
        aud = LocalIssuer.audience
        iat = Int64(now.rounded(.down))
        exp = iat + Int64(lifetime)
        self.authorization = authorization
    }

    /// The claims as compact JSON with sorted keys (``RS256Signer/compactJSON(_:)``).
    func json() throws -> Data { try RS256Signer.compactJSON(self) }
}
