import Foundation
import Testing

@testable import TokenAgentServer

/// The periodic cache snapshot runs on a thread of its own, at the agent's priority until it
/// yields the cores to every other thread (SCHED_IDLE), and only that thread: the socket loops
/// keep the agent's. Read from the kernel's own account, `/proc/thread-self/stat`.
@Suite("Background thread")
struct BackgroundThreadTests {
    /// The calling thread's nice value and scheduling policy: fields 19 and 41 of
    /// `/proc/thread-self/stat` (after the parenthesised command name, which may hold spaces).
    struct KernelScheduling: Equatable {
        var niceness: Int32
        var policy: Int32

        /// Linux's SCHED_IDLE.
        static let idlePolicy: Int32 = 5

        static func ofThisThread() -> KernelScheduling? {
            guard let stat = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { return nil }
            // fields[0] is field 3 (state): field N is fields[N - 3].
            let fields = stat[stat.index(after: end)...].split(separator: " ")
            guard fields.count > 38, let niceness = Int32(fields[16]), let policy = Int32(fields[38]) else {
                return nil
            }
            return KernelScheduling(niceness: niceness, policy: policy)
        }
    }

    @Test func theWorkStartsAtTheCallersPriorityAndYieldsOnlyItsOwnThread() async throws {
        let caller = try #require(KernelScheduling.ofThisThread())
        let seen = try #require(
            await BackgroundThread.run { () -> [KernelScheduling?] in
                let before = KernelScheduling.ofThisThread()
                let outcome = BackgroundThread.yieldToOthers()
                return [before, outcome == .idle ? KernelScheduling.ofThisThread() : nil]
            }
        )
        #expect(seen[0] == caller, "the work starts as its caller runs")
        #expect(seen[1] == KernelScheduling(niceness: caller.niceness, policy: KernelScheduling.idlePolicy))
        #expect(KernelScheduling.ofThisThread() == caller, "only the background thread yields")
    }
}
