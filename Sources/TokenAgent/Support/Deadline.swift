import Synchronization

/// Runs `operation` in a task of its own and returns what it returns, or `nil` once `deadline`
/// (on the continuous clock) comes first: then the operation's task is cancelled and left to end
/// on its own, and the caller goes on at once, whether or not the operation heeds cancellation.
/// A caller that is cancelled cancels the operation and waits for it.
func untilDeadline<Value: Sendable>(
    _ deadline: ContinuousClock.Instant,
    _ operation: @escaping @Sendable () async -> Value
) async -> Value? {
    let race = DeadlineRace<Value>()
    let work = Task { await operation() }
    return await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
            race.start(continuation)
            let timer = Task {
                // Cancelled when the work ends first: then nothing is resumed here.
                try? await Task.sleep(until: deadline, clock: .continuous)
                if race.finish(with: nil) { work.cancel() }
            }
            Task {
                let value = await work.value
                if race.finish(with: value) { timer.cancel() }
            }
        }
    } onCancel: {
        work.cancel()
    }
}

/// The one resumption of an ``untilDeadline(_:_:)`` call: the first of the work and the timer
/// resumes the caller, the other finds nothing left to resume.
private final class DeadlineRace<Value: Sendable>: Sendable {
    private let continuation = Mutex<CheckedContinuation<Value?, Never>?>(nil)

    /// Sets the continuation; called before either racer starts.
    func start(_ continuation: CheckedContinuation<Value?, Never>) {
        self.continuation.withLock { $0 = continuation }
    }

    /// Ends the race with `value` (`nil`: the deadline); `false` when it had already ended.
    func finish(with value: Value?) -> Bool {
        let taken = continuation.withLock { continuation in
            defer { continuation = nil }
            return continuation
        }
        taken?.resume(returning: value)
        return taken != nil
    }
}
