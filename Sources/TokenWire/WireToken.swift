import CTokenSegment

/// What the agent ever serves as a token, for readers to check what they are handed: a reply on
/// a socket, or a slot of a shared-memory segment, may come from a peer that is not the agent.
/// The bounds are the segment header's (`fleet_tokend_segment.h`, which C readers check by), read
/// here and nowhere else: the agent's own acceptance and configuration take them from here.
public enum WireToken {
    /// The longest token, in bytes (16 KiB, `FTS_MAX_TOKEN_LENGTH`): the agent accepts no longer
    /// one from a provider.
    public static let maxBytes = Int(FTS_MAX_TOKEN_LENGTH)
    /// The longest the agent keeps a token, in seconds (30 days, `FTS_MAX_LIFETIME_S`): it brings
    /// any later expiry back to the fetch time plus a kind's `max_lifetime`, at most this.
    public static let maxLifetimeSeconds = Int64(FTS_MAX_LIFETIME_S)
    /// How far outside now to now plus ``maxLifetimeSeconds`` an expiry may lie, in seconds (a
    /// day, `FTS_EXPIRY_SLACK_S`): room for the wall clock being set between the agent's fetch
    /// and the read.
    public static let expirySlackSeconds = Int64(FTS_EXPIRY_SLACK_S)

    /// Whether `token` is 1 to ``maxBytes`` bytes of printable ASCII without spaces (0x21 to
    /// 0x7E): the agent's own rule for every token it caches.
    public static func isWellFormed(_ token: some Collection<UInt8>) -> Bool {
        !token.isEmpty && token.count <= maxBytes && token.allSatisfy { $0 > 0x20 && $0 < 0x7F }
    }

    /// Whether `expiresAt` (Unix seconds) is one the agent could serve at `now` (Unix seconds):
    /// from a day before now to 30 days and a day after it.
    public static func isPlausibleExpiry(_ expiresAt: Int64, now: Int64) -> Bool {
        let earliest = now.subtractingReportingOverflow(expirySlackSeconds)
        let latest = now.addingReportingOverflow(maxLifetimeSeconds + expirySlackSeconds)
        return (earliest.overflow || expiresAt >= earliest.partialValue)
            && (latest.overflow || expiresAt <= latest.partialValue)
    }

    /// Why `token` with `expiresAt` cannot be what the agent served at `now`, or `nil`. The text
    /// never holds the token.
    public static func problem(token: String, expiresAt: Int64, now: Int64) -> String? {
        if !isWellFormed(token.utf8) {
            return "the token is not 1 to \(maxBytes) bytes of printable ASCII (\(token.utf8.count) bytes)"
        }
        if !isPlausibleExpiry(expiresAt, now: now) {
            return "the token's expiry \(expiresAt) is not within a day of now to 30 days ahead"
        }
        return nil
    }
}
