#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// A Fleet Engine token as the agent served it.
public struct Token: Sendable, Hashable, CustomStringConvertible {
    /// The JWT, to send as `Authorization: Bearer <jwt>` (or hand to the Driver/Consumer SDK); for
    /// an access token (``TokenSubject/accessToken(_:)``), the opaque OAuth 2.0 token, sent the
    /// same way.
    public var jwt: String
    /// When the token expires.
    public var expiresAt: Date

    /// Creates a token.
    public init(jwt: String, expiresAt: Date) {
        self.jwt = jwt
        self.expiresAt = expiresAt
    }

    /// Seconds left before expiry, measured on the wall clock.
    public var remainingValidity: TimeInterval { expiresAt.timeIntervalSinceNow }

    /// Never prints the token itself.
    public var description: String { "Token(expiresAt: \(expiresAt), jwt: <\(jwt.utf8.count) bytes>)" }
}
