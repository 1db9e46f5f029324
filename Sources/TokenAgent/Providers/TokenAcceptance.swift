/// The checks every fetched token passes before it is cached, whatever provider made it.
public struct TokenAcceptance: Sendable {
    /// The longest token accepted, in bytes.
    public static let maxTokenBytes = 16 * 1024

    /// The `authorization` claim name for each kind (`vehicle` -> `vehicleid`).
    public var claimNames: [String: String]

    /// Creates the checks with a claim name per kind.
    public init(claimNames: [String: String] = FleetEngineKinds.claimNames) {
        self.claimNames = claimNames
    }

    /// Checks `candidate` for `key` at wall time `now`: the token is printable ASCII without
    /// spaces, a JWT's `exp` bounds the expiry (the earlier wins), a JWT naming another id for this
    /// kind is refused, and an expired token is a failure. Returns the token with its final expiry.
    public func accept(token: String, expiresAt: Double?, for key: TokenKey, now: Double) throws -> FetchedToken {
        guard !token.isEmpty, token.utf8.count <= Self.maxTokenBytes,
            token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw ProviderError.failed("token is empty, too long, or not printable ASCII")
        }
        var expiry = expiresAt
        if let claims = JWTClaims(token: token) {
            if let exp = claims.expiresAt { expiry = min(expiry ?? exp, exp) }
            if let claim = claimNames[key.kind], let named = claims.authorization[claim], named != "*",
                !named.utf8.elementsEqual(key.id.utf8)
            {
                throw ProviderError.rejected("token's \(claim) claim names another id")
            }
        }
        guard let expiry else { throw ProviderError.failed("no expiry in the reply and the token has no exp") }
        guard expiry > now else { throw ProviderError.failed("token is already expired") }
        return FetchedToken(token: token, expiresAtUnixSeconds: expiry)
    }
}
