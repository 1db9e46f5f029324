import Synchronization

/// A counting semaphore for async code: at most `limit` holders at once, the rest wait in three
/// levels, each in arrival order: background refreshes of tokens in use first, then fetches
/// someone waits for (and fetches a request joined: ``promote(_:)``), then `WARM` fetches.
///
/// A waiter whose task is cancelled leaves the queue at once and throws `CancellationError`;
/// the queue's storage shrinks as it drains, however long the limiter stays saturated.
public final class AsyncLimiter: Sendable {
    private struct State {
        var available: Int
        var waiters = PriorityWaiters<CheckedContinuation<Void, any Error>>()
    }

    private let state: Mutex<State>

    /// Creates a limiter that lets `limit` callers hold it at once.
    public init(limit: Int) {
        precondition(limit > 0, "limit must be positive")
        state = Mutex(State(available: limit))
    }

    /// How many callers wait for a place now.
    public var waiting: Int { state.withLock { $0.waiters.count } }

    /// Tickets kept in the arrival queues (waiting or already gone but not yet compacted away).
    var queueStorage: Int { state.withLock { $0.waiters.storage } }

    /// The lane's level of a ticket: refreshes, then GETs and promoted fetches, then WARMs.
    private static func level(_ ticket: FetchTicket) -> Int {
        if ticket.requested == .refresh { return 0 }
        return ticket.priority == .warm ? 2 : 1
    }

    /// Runs `body` once a place is free, and frees it afterwards; an `urgent` caller gets a place
    /// before every caller that is not. Throws `CancellationError`, without running `body`, when
    /// the task is cancelled while it waits.
    public func withPlace<T: Sendable>(urgent: Bool = false, _ body: () async throws -> T) async throws -> T {
        try await withPlace(ticket: FetchTicket(priority: urgent ? .refresh : .get), body)
    }

    /// Runs `body` once a place is free for `ticket`, and frees it afterwards: a refresh's ticket
    /// before every other, a `WARM`'s after every other unless it was promoted. Throws
    /// `CancellationError`, without running `body`, when the task is cancelled while it waits.
    public func withPlace<T: Sendable>(ticket: FetchTicket, _ body: () async throws -> T) async throws -> T {
        try await acquire(ticket)
        defer { release() }
        return try await body()
    }

    /// Moves `ticket`, if it waits here, to the level its priority now gives it (after a
    /// promotion).
    public func promote(_ ticket: FetchTicket) {
        state.withLock { $0.waiters.raise(ticket.number, to: Self.level(ticket)) }
    }

    private func acquire(_ ticket: FetchTicket) async throws {
        // A task cancelled before it asks takes no place, even a free one.
        try Task.checkCancellation()
        let free = state.withLock { state -> Bool in
            guard state.available > 0 else { return false }
            state.available -= 1
            return true
        }
        if free { return }
        let number = ticket.number
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Next { case wait, resume, cancel }
                let next = state.withLock { state -> Next in
                    if Task.isCancelled { return .cancel }
                    if state.available > 0 {
                        state.available -= 1
                        return .resume
                    }
                    // The level is read under the lock: a promotion before this is seen here, one
                    // after it finds the waiter.
                    state.waiters.add(number, continuation, level: Self.level(ticket), owner: ticket.owner)
                    return .wait
                }
                switch next {
                case .wait: break
                case .resume: continuation.resume()
                case .cancel: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let cancelled = state.withLock { $0.waiters.remove(number) }
            cancelled?.resume(throwing: CancellationError())
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if let (_, waiter) = state.waiters.next() { return waiter }
            state.available += 1
            return nil
        }
        next?.resume()
    }
}
