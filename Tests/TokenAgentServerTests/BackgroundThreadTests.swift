import Foundation
import Testing

@testable import TokenAgentServer

/// The periodic cache snapshot runs on a thread of its own whose CPU priority is lowered, and only
/// that thread's: the socket loops keep the agent's.
@Suite("Background thread")
struct BackgroundThreadTests {
    /// The calling thread's nice value: field 19 of `/proc/thread-self/stat` (after the
    /// parenthesised command name, which may hold spaces).
    static func threadNiceness() -> Int32? {
        guard let stat = try? String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8),
            let end = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        // fields[0] is field 3 (state); nice is field 19.
        return fields.count > 16 ? Int32(fields[16]) : nil
    }

    @Test func theWorkRunsLowerAndTheCallerKeepsItsPriority() async throws {
        let caller = try #require(Self.threadNiceness())
        let inside = try #require(await BackgroundThread.run { Self.threadNiceness() })
        #expect(inside == min(19, caller + BackgroundThread.niceness))
        #expect(Self.threadNiceness() == caller, "only the background thread was lowered")
    }
}
