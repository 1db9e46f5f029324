import Foundation

/// Runs blocking work (a `read`, a `waitpid`, a semaphore) on a thread of its own, so a test never
/// holds one of Swift concurrency's few pool threads (two on a two-core machine) while it waits.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// Whether `condition` holds within `seconds` of real time, looked at every `interval`. The time
/// is a hang detector, not a latency bound: the wait ends as soon as the condition holds, however
/// slow the machine, so a test waits for an event, never for a fixed time.
public func eventually(
    within seconds: Double = 60,
    every interval: Duration = .milliseconds(10),
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}
