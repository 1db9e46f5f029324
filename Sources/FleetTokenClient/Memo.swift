import Foundation
import Synchronization
import TokenWire

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
    /// its minimum validity.
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
            let needed = minimumValidity ?? max(10, min(defaultMinimumValidity, entry.lifetimeSeconds / 4))
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
        let left = token.expiresAt.timeIntervalSinceNow
        let entry = Entry(
            token: token,
            validUntil: now.advanced(by: .milliseconds(Int64(saturating: left * 1000))),
            lifetimeSeconds: left
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
}
