import Synchronization

/// Requests in flight, by what they ask: concurrent callers asking the same wait for the first
/// caller's request instead of sending their own (no task per flight).
final class Flights: Sendable {
    /// What a flight asks: a subject and a minimum validity.
    struct Key: Hashable, Sendable {
        var subject: TokenSubject
        var minimumValidity: Int?
    }

    typealias Waiter = UnsafeContinuation<Result<Token, FleetTokenError>?, Never>

    private let flights = Mutex<[Key: [Waiter]]>([:])

    /// Starts a flight for `key` if none is in flight: `true` when the caller now leads it and
    /// must ``land(_:with:)`` it.
    func lead(_ key: Key) -> Bool {
        flights.withLock { flights in
            guard flights[key] == nil else { return false }
            flights[key] = []
            return true
        }
    }

    /// The result of the flight for `key`; `nil` when it landed before the caller could join.
    nonisolated(nonsending) func join(_ key: Key) async -> Result<Token, FleetTokenError>? {
        await withUnsafeContinuation { continuation in
            let joined = flights.withLock { flights -> Bool in
                guard flights[key] != nil else { return false }
                flights[key]!.append(continuation)
                return true
            }
            if !joined { continuation.resume(returning: nil) }
        }
    }

    /// Ends the flight for `key` and hands `result` to everyone who joined it.
    func land(_ key: Key, with result: Result<Token, FleetTokenError>) {
        let waiters = flights.withLock { $0.removeValue(forKey: key) ?? [] }
        for waiter in waiters { waiter.resume(returning: result) }
    }
}
