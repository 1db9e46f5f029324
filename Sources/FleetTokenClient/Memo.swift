import Synchronization
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The tokens a client remembers, under their own lock (never the connection's).
final class MemoTable: Sendable {
    private struct Entry {
        var token: Token
        var validUntil: ContinuousClock.Instant
        var lifetimeSeconds: Double
    }

    private let entries = Mutex<[TokenSubject: Entry]>([:])
    private let capacity: Int
    private let defaultMinimumValidity: TimeInterval

    /// A memo of at most `capacity` tokens; a remembered token needs
    /// `max(10, min(defaultMinimumValidity, lifetime / 4))` seconds left unless the call names
    /// its minimum validity, the agent's own rule (``lifetime(of:receivedAt:)`` says which
    /// lifetime), so the memo never serves a token the agent would refuse on the same GET.
    init(capacity: Int, defaultMinimumValidity: TimeInterval) {
        self.capacity = capacity
        self.defaultMinimumValidity = defaultMinimumValidity
    }

    /// The remembered token for `subject` if it has enough validity left at `now` (the default
    /// argument; tests pass a later instant instead of waiting).
    func token(
        for subject: TokenSubject,
        minimumValidity: TimeInterval?,
        at now: ContinuousClock.Instant = .now
    ) -> Token? {
        entries.withLock { entries -> Token? in
            guard let entry = entries[subject] else { return nil }
            var needed = minimumValidity ?? max(10, min(defaultMinimumValidity, entry.lifetimeSeconds / 4))
            // An access token is never served with less left, by the agent or here.
            if AccessTokenKind.isAccessKind(subject.kind) { needed = max(needed, AccessTokenKind.servingFloor) }
            let left = now.duration(to: entry.validUntil)
            guard left > .milliseconds(Int64(saturating: needed * 1000)) else { return nil }
            return entry.token
        }
    }

    /// Remembers `token` for `subject`, received at `now` (the default argument; tests pass
    /// another instant).
    func remember(_ token: Token, for subject: TokenSubject, at now: ContinuousClock.Instant = .now) {
        // A memo of no capacity holds nothing (eviction below makes room for one token only).
        guard capacity > 0 else { return }
        let received = Date()
        let left = token.expiresAt.timeIntervalSince(received)
        let entry = Entry(
            token: token,
            validUntil: now.advanced(by: .milliseconds(Int64(saturating: left * 1000))),
            lifetimeSeconds: Self.lifetime(of: token, receivedAt: received)
        )
        entries.withLock { entries in
            if entries.count >= capacity, entries[subject] == nil {
                entries = entries.filter { $0.value.validUntil > now }
                if entries.count >= capacity, let victim = entries.keys.first {
                    entries.removeValue(forKey: victim)
                }
            }
            entries[subject] = entry
        }
    }

    /// Forgets the token for `subject`; only if it is `jwt` when `jwt` is given.
    func forget(_ subject: TokenSubject, ifHolding jwt: String? = nil) {
        entries.withLock { entries in
            if jwt == nil || entries[subject]?.token.jwt == jwt { entries[subject] = nil }
        }
    }

    /// Forgets every token.
    func removeAll() {
        entries.withLock { $0.removeAll() }
    }

    /// The lifetime the agent's rule is applied to, seconds: never shorter than the one the agent
    /// itself uses (the validity the token had when the agent fetched it), so the memo's
    /// `lifetime / 4` never asks less than the agent's.
    ///
    /// The reply on the socket carries only the expiry. For a JWT whose payload has an `iat` no
    /// later than now, the lifetime is the expiry less `iat`: the agent fetched the token at `iat`
    /// or after. Any other token (opaque, no readable `iat`, or an `iat` in the future, which a
    /// skewed clock makes) counts as infinitely long-lived: it then needs the whole default
    /// minimum validity, as an hour-long token does.
    static func lifetime(of token: Token, receivedAt received: Date) -> TimeInterval {
        let left = token.expiresAt.timeIntervalSince(received)
        guard let issuedAt = issuedAt(ofJWT: token.jwt), issuedAt <= received.timeIntervalSince1970 else {
            return .infinity
        }
        return max(left, token.expiresAt.timeIntervalSince1970 - issuedAt)
    }

    /// The `iat` claim of `jwt` (Unix seconds) when it is a JWT (three parts) whose payload reads
    /// as the agent reads a provider's: strict unpadded base64url (``StrictBase64URL``: the
    /// URL-safe alphabet only, no padding) of a JSON object (``StrictJSON``) that gives no claim
    /// twice, with a finite number for `iat`; `nil` otherwise, and for a payload that holds a
    /// number too large for a `Double` anywhere. Every JWT the agent serves reads so (its issuers
    /// write such payloads, and it serves no provider's token whose payload does not read so); a
    /// token whose payload does not counts as opaque, which only makes the memo stricter. (A
    /// boolean reads as 0 or 1: that only makes the lifetime longer, and the memo stricter.)
    static func issuedAt(ofJWT jwt: String) -> TimeInterval? {
        let parts = jwt.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].count <= 8192,
            let payload = StrictBase64URL.decode(String(decoding: parts[1], as: UTF8.self)),
            let claims = StrictJSON(bytes: payload), let members = claims.members, allFinite(claims)
        else { return nil }
        // A claim given twice is read differently by different readers: neither is taken (the
        // agent's rule, which its JWTClaims applies to a payload's claims).
        guard StrictJSON.firstRepeatedName(in: members) == nil else { return nil }
        switch members.first(where: { $0.name == "iat" })?.value {
        case .number(let value): return value
        case .bool(let value): return value ? 1 : 0
        default: return nil
        }
    }

    /// Whether every number in `value` is finite.
    private static func allFinite(_ value: StrictJSON) -> Bool {
        switch value {
        case .number(let number): number.isFinite
        case .array(let elements): elements.allSatisfy(allFinite)
        case .object(let members): members.allSatisfy { allFinite($0.value) }
        case .string, .bool, .null: true
        }
    }
}
