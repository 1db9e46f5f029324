import Foundation
import Synchronization
import TestSupport
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

    /// The operation ignores cancellation and ends only when the test lets it, after the call
    /// returned: the caller went on at the deadline, not when the work ended.
    @Test func theCallerGoesOnAtTheDeadlineEvenIfTheOperationDoesNotStop() async {
        let gate = DeadlineGate()
        let value = await untilDeadline(.now + .milliseconds(100)) { await gate.wait(returning: 1) }
        #expect(value == nil)
        #expect(!gate.isOpen, "released while the work still ran")
        gate.open()
    }

    @Test func anOperationThatEndsFirstGivesItsValue() async {
        let value = await untilDeadline(.now + hangLimitDuration) { await Self.uncooperative(0.05, returning: 7) }
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
        #expect(await eventually { cancelled.seen.withLock { $0 } }, "the operation's task was cancelled")
    }
}

/// Holds an operation until the test opens it.
private final class DeadlineGate: Sendable {
    private let state = Mutex<(open: Bool, waiting: CheckedContinuation<Void, Never>?)>((false, nil))

    var isOpen: Bool { state.withLock { $0.open } }

    /// Waits, ignoring cancellation, until ``open()``; then returns `value`.
    func wait(returning value: Int) async -> Int {
        await withCheckedContinuation { continuation in
            let open = state.withLock { state in
                if !state.open { state.waiting = continuation }
                return state.open
            }
            if open { continuation.resume() }
        }
        return value
    }

    func open() {
        let waiting = state.withLock { state in
            state.open = true
            defer { state.waiting = nil }
            return state.waiting
        }
        waiting?.resume()
    }
}

/// Whether an operation saw its cancellation.
private final class CancelFlag: Sendable {
    let seen = Mutex(false)
}
