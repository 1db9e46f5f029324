/// What the cache holds for one kind, counted by walking its entries (for metrics and health, not
/// for requests): entries, tokens, and how close the tokens read within the idle time-out are to
/// expiry.
public struct KindSurvey: Sendable, Hashable {
    /// The kind.
    public var kind: String
    /// Entries held: with a token, or remembering failures only.
    public var entries = 0
    /// Entries holding a token that can still be served.
    public var tokens = 0
    /// Entries holding a token and read within the idle time-out ("in the idle window").
    public var activeTokens = 0
    /// The least time left, seconds, among the tokens read within the idle time-out; `nil` when
    /// there is none.
    public var soonestActiveExpiry: Double?
    /// Tokens read within the idle time-out with less time left than a default GET requires (the
    /// minimum validity, capped at a quarter of the token's lifetime): a refresh is late.
    public var activeBelowMinimumValidity = 0

    /// An empty survey of `kind`.
    public init(kind: String) { self.kind = kind }

    /// Adds the counts of `other`, a survey of the same kind (another shard's).
    mutating func add(_ other: KindSurvey) {
        entries += other.entries
        tokens += other.tokens
        activeTokens += other.activeTokens
        if let soonest = other.soonestActiveExpiry {
            soonestActiveExpiry = min(soonestActiveExpiry ?? soonest, soonest)
        }
        activeBelowMinimumValidity += other.activeBelowMinimumValidity
    }
}
