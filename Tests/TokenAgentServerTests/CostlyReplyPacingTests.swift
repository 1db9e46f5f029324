import NIOCore
import Testing
import TokenAgent

@testable import TokenAgentServer

/// A uid's costly replies (`STATS`, `METRICS`, `INFO`) are paced to a budget of work a second,
/// shared by its connections; other uids, and cached GETs, are not held by it.
@Suite struct CostlyReplyPacingTests {
    /// A second's budget goes at once; past it each reply waits for the work before it.
    @Test func aBudgetsWorthGoesAtOnceAndTheRestWaitsItsTurn() {
        let pacer = CostlyReplyPacer(unitsPerSecond: 80)
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        // 80 units: ten STATS of 8 at once.
        for _ in 0..<10 { #expect(pacer.charge(1000, units: 8, now: now) == .zero) }
        // The eleventh's turn is one second on, less the second of burst: at once still...
        #expect(pacer.charge(1000, units: 8, now: now) == .zero)
        // ...the twelfth waits for the eleventh's 8 units: 100 ms.
        #expect(pacer.charge(1000, units: 8, now: now) == .milliseconds(100))
        // Time returns the budget.
        #expect(pacer.charge(1000, units: 8, now: now + .seconds(2)) == .zero)
        // Another uid, and the unidentified peers, have budgets of their own.
        #expect(pacer.charge(1001, units: 8, now: now) == .zero)
        #expect(pacer.charge(nil, units: 8, now: now) == .zero)
    }

    /// Two connections of one uid share its budget: once the first spent it, the second's
    /// `METRICS` waits its turn, and the `PING` behind it waits too (replies keep their order);
    /// another uid's `METRICS` is answered meanwhile.
    @Test func aUIDsConnectionsShareItsBudgetAndAnotherUIDsDoNot() async throws {
        // One unit a second: one METRICS (65 units) at once a uid, the next 64 s later.
        let pacer = CostlyReplyPacer(unitsPerSecond: 1)
        let first = try ServedConnection(peer: PeerCredentials(pid: 1, uid: 1000, gid: 1000), costlyReplies: pacer)
        let second = try ServedConnection(peer: PeerCredentials(pid: 2, uid: 1000, gid: 1000), costlyReplies: pacer)
        let other = try ServedConnection(peer: PeerCredentials(pid: 3, uid: 2000, gid: 2000), costlyReplies: pacer)
        try await first.send("METRICS\n")
        #expect(try await first.lines(through: "# EOF").count > 1)
        try await second.send("METRICS\nPING\n")
        try await other.send("METRICS\n")
        #expect(try await other.lines(through: "# EOF").count > 1, "another uid is answered at once")
        // The second connection's METRICS waits a minute for its uid's turn, its PING behind it.
        #expect(second.repliesWaiting == 0, "nothing of the second connection's yet")
        // Cached GETs are not paced: the first connection's GET is answered now, its uid's
        // budget spent or not.
        let replies = try await first.replies(to: "GET vehicle v-1\n")
        #expect(replies.count == 1 && replies[0].hasPrefix("OK tok-v-1 "), "\(replies)")
        #expect(second.repliesWaiting == 0, "the second connection's METRICS still waits")
        await first.finish()
        await second.finish()
        await other.finish()
    }
}
