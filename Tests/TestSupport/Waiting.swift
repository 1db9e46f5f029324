import Foundation

/// Runs blocking work (a `read`, a `waitpid`, a semaphore) on a thread of its own, so a test never
/// holds one of Swift concurrency's few pool threads (two on a two-core machine) while it waits.
public func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// How long a test waits for an event before it calls the wait a hang: 300 s of real time.
///
/// It bounds a hang, never a latency: every wait ends as soon as its event comes. It is longer
/// than a whole run because a test's wall time in the parallel run is the run's, not its own:
/// Swift Testing starts every test at once on the two pool threads, so each step of a test waits
/// its turn behind every other test's, and an engine test with no I/O took 30 s of a loaded 80 s
/// run. With both cores kept busy by another process, runs lasted up to 175 s, and 60 s limits
/// fired on tests whose events came, late.
public let hangLimit: Double = 300

/// ``hangLimit`` as a `Duration`.
public let hangLimitDuration: Duration = .seconds(hangLimit)

/// Whether `condition` holds within `seconds` of real time, looked at every `interval`. The time
/// is a hang detector, not a latency bound: the wait ends as soon as the condition holds, however
/// slow the machine, so a test waits for an event, never for a fixed time.
public func eventually(
    within seconds: Double = hangLimit,
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
