import Foundation
import Synchronization
import Testing

@testable import TokenAgent

@Suite("untilDeadline")
struct DeadlineTests {
    /// An operation that ignores cancellation and ends after `seconds`, on a thread of its own.
    private static func uncooperative(_ seconds: Double, returning value: Int) async -> Int {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                Thread.sleep(forTimeInterval: seconds)
                continuation.resume(returning: value)
            }
        }
    }

    @Test func theCallerGoesOnAtTheDeadlineEvenIfTheOperationDoesNotStop() async {
        let started = ContinuousClock.now
        let value = await untilDeadline(.now + .milliseconds(100)) { await Self.uncooperative(6, returning: 1) }
        #expect(value == nil)
        #expect(ContinuousClock.now - started < .seconds(5), "released at the deadline, not when the work ends")
    }

    @Test func anOperationThatEndsFirstGivesItsValue() async {
        let value = await untilDeadline(.now + .seconds(60)) { await Self.uncooperative(0.05, returning: 7) }
        #expect(value == 7)
    }

    @Test func theOperationIsCancelledAtTheDeadline() async throws {
        let cancelled = CancelFlag()
        let value = await untilDeadline(.now + .milliseconds(100)) { () -> Bool in
            try? await Task.sleep(for: .seconds(60))
            cancelled.seen.withLock { $0 = Task.isCancelled }
            return true
        }
        #expect(value == nil)
        for _ in 0..<500 where !cancelled.seen.withLock({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        #expect(cancelled.seen.withLock { $0 }, "the operation's task was cancelled")
    }
}

/// Whether an operation saw its cancellation.
private final class CancelFlag: Sendable {
    let seen = Mutex(false)
}
