import Synchronization

/// A counting semaphore for async code: at most `limit` holders at once, the rest wait in order,
/// urgent waiters (background refreshes of tokens in use) before the others.
///
/// A waiter whose task is cancelled leaves the queue at once and throws `CancellationError`;
/// the queue's storage shrinks as it drains, however long the limiter stays saturated.
public final class AsyncLimiter: Sendable {
    /// Tickets in arrival order from `head` on; tickets of cancelled waiters are skipped.
    private struct TicketQueue {
        var order: [UInt64] = []
        var head = 0

        var storage: Int { order.count - head }

        /// The next ticket with a waiter in `waiters`, removed from both.
        mutating func next(
            from waiters: inout [UInt64: CheckedContinuation<Void, any Error>]
        ) -> CheckedContinuation<Void, any Error>? {
            defer { compact() }
            while head < order.count {
                let ticket = order[head]
                head += 1
                if let waiter = waiters.removeValue(forKey: ticket) { return waiter }
            }
            return nil
        }

        /// Drops the consumed front of `order` once it is most of the storage.
        mutating func compact() {
            if head == order.count {
                order.removeAll(keepingCapacity: order.count <= 1024)
                head = 0
            } else if head >= 1024, head * 2 >= order.count {
                order.removeFirst(head)
                head = 0
            }
        }
    }

    private struct State {
        var available: Int
        /// Waiting callers by ticket.
        var waiters: [UInt64: CheckedContinuation<Void, any Error>] = [:]
        var urgent = TicketQueue()
        var normal = TicketQueue()
        var nextTicket: UInt64 = 0
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
    var queueStorage: Int { state.withLock { $0.urgent.storage + $0.normal.storage } }

    /// Runs `body` once a place is free, and frees it afterwards; an `urgent` caller gets a place
    /// before every caller that is not. Throws `CancellationError`, without running `body`, when
    /// the task is cancelled while it waits.
    public func withPlace<T: Sendable>(urgent: Bool = false, _ body: () async throws -> T) async throws -> T {
        try await acquire(urgent: urgent)
        defer { release() }
        return try await body()
    }

    private func acquire(urgent: Bool) async throws {
        // A task cancelled before it asks takes no place, even a free one.
        try Task.checkCancellation()
        let ticket = state.withLock { state -> UInt64? in
            if state.available > 0 {
                state.available -= 1
                return nil
            }
            state.nextTicket += 1
            return state.nextTicket
        }
        guard let ticket else { return }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Next { case wait, resume, cancel }
                let next = state.withLock { state -> Next in
                    if Task.isCancelled { return .cancel }
                    if state.available > 0 {
                        state.available -= 1
                        return .resume
                    }
                    state.waiters[ticket] = continuation
                    if urgent { state.urgent.order.append(ticket) } else { state.normal.order.append(ticket) }
                    return .wait
                }
                switch next {
                case .wait: break
                case .resume: continuation.resume()
                case .cancel: continuation.resume(throwing: CancellationError())
                }
            }
        } onCancel: {
            let cancelled = state.withLock { $0.waiters.removeValue(forKey: ticket) }
            cancelled?.resume(throwing: CancellationError())
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            if let waiter = state.urgent.next(from: &state.waiters) ?? state.normal.next(from: &state.waiters) {
                return waiter
            }
            state.available += 1
            return nil
        }
        next?.resume()
    }
}
