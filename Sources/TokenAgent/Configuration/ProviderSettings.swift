/// The settings of one kind's HTTP token provider.
public struct ProviderSettings: Sendable, Hashable, Codable {
    /// The URL template; `{id}` is replaced by the percent-encoded id.
    public var url: String
    /// The JSON field that holds the token, tried before the usual names.
    public var tokenField: String?
    /// The JSON field that holds the expiry, tried before the usual names.
    public var expiryField: String?
    /// How ``expiryField`` is read (default absolute).
    public var expiryMode: ExpiryMode?
    /// A file of extra request headers, one `Name: value` a line (the agent's own credentials).
    public var headersFile: String?
    /// The connect time-out in seconds (default 2).
    public var connectTimeout: Double?
    /// The total time-out of one fetch in seconds (default 10).
    public var timeout: Double?
    /// The `authorization` claim that names this kind's id (default: Fleet Engine's for the kind).
    public var claim: String?
    /// Whether this kind's tokens may act for every id: `*` in their `authorization` claim, or
    /// no entry for the kind (default false: such a token is refused for a per-id request).
    public var acceptWildcard: Bool?
    /// The longest a token of this kind is kept, seconds (60 to 2592000, default 86400): an
    /// expiry further ahead, however the reply states it, is brought back to this.
    public var maxLifetime: Double?

    /// Creates settings for `url`.
    public init(url: String) { self.url = url }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case url
        case tokenField = "token_field"
        case expiryField = "expiry_field"
        case expiryMode = "expiry_mode"
        case headersFile = "headers_file"
        case connectTimeout = "connect_timeout"
        case timeout
        case claim
        case acceptWildcard = "accept_wildcard"
        case maxLifetime = "max_lifetime"
    }
}
