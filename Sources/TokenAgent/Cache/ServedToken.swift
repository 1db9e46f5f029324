/// A token as the agent serves it.
public struct ServedToken: Sendable, Hashable {
    /// The token text.
    public var token: String
    /// Its expiry, Unix seconds.
    public var expiresAt: Int64

    /// Creates a served token.
    public init(token: String, expiresAt: Int64) {
        self.token = token
        self.expiresAt = expiresAt
    }
}
