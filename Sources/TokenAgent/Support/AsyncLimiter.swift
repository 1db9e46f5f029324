import Synchronization

/// A counting semaphore for async code: at most `limit` holders at once, the rest wait in order.
public final class AsyncLimiter: Sendable {
    private struct State {
        var available: Int
        var waiters: [CheckedContinuation<Void, Never>] = []
        var head = 0
    }

    private let state: Mutex<State>

    /// Creates a limiter that lets `limit` callers hold it at once.
    public init(limit: Int) {
        precondition(limit > 0, "limit must be positive")
        state = Mutex(State(available: limit))
    }

    /// How many callers wait for a place now.
    public var waiting: Int { state.withLock { $0.waiters.count - $0.head } }

    /// Runs `body` once a place is free, and frees it afterwards.
    public func withPlace<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        let acquired = state.withLock { state -> Bool in
            if state.available > 0 {
                state.available -= 1
                return true
            }
            return false
        }
        if acquired { return }
        await withCheckedContinuation { continuation in
            let resumeNow = state.withLock { state -> Bool in
                if state.available > 0 {
                    state.available -= 1
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.head < state.waiters.count {
                let next = state.waiters[state.head]
                state.head += 1
                if state.head == state.waiters.count {
                    state.waiters.removeAll(keepingCapacity: true)
                    state.head = 0
                }
                return next
            }
            state.available += 1
            return nil
        }
        next?.resume()
    }
}
