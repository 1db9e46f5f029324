import NIOCore
import Testing
import TokenAgent

@testable import TokenAgentServer

/// The request handler's behaviour in time, driven through a scripted transport: the test is the
/// peer and the clock (``ScriptedConnection``), so a time-out is checked at its exact instant,
/// with no socket and no sleep. `RequestHandlerTests` keeps a few of these end to end on the
/// real socket loop.
@Suite("Request handler, scripted")
struct RequestHandlerBehaviourTests {
    @Test func aPartialLineTimesOutAtItsTimeAndTheConnectionLingersThenCloses() {
        let connection = ScriptedConnection(requestTimeout: .seconds(1))
        connection.send("PING\nGET veh")
        #expect(connection.lines() == ["PONG"])
        connection.advance(by: .milliseconds(999))
        #expect(connection.lines() == [], "not before the time-out")
        connection.advance(by: .milliseconds(1))
        #expect(connection.lines() == ["ERR bad-request request timed out"])
        #expect(connection.transport.outputShut, "our side is shut after the last reply")
        #expect(!connection.closed, "while the client's input is drained")
        connection.send("icle v-1\n")
        #expect(connection.lines() == [], "what the client still sends is dropped")
        connection.advance(by: .seconds(1))
        #expect(connection.closed, "the linger ends at its time")
        #expect(connection.transport.armedTimers == 0)
    }

    @Test func aLineFinishedInTimeCancelsTheClockAndIdleConnectionsStay() {
        let connection = ScriptedConnection(requestTimeout: .seconds(5))
        connection.send("GET veh")
        connection.advance(by: .milliseconds(2500))
        connection.send("icle v-1\n")
        #expect(connection.lines().first?.hasPrefix("OK tok-v-1 ") == true)
        connection.send("PI")
        connection.advance(by: .milliseconds(2500))
        connection.send("NG\n")
        #expect(connection.lines() == ["PONG"], "each line has its own 5 s")
        #expect(connection.transport.armedTimers == 0, "no clock runs on an idle connection")
        connection.advance(by: .seconds(3600))
        #expect(!connection.closed, "an idle connection with nothing pending is kept")
        #expect(connection.lines() == [], "and nothing was sent on it")
    }

    @Test func thePartialLineClockPausesWhileReadingIsHeld() {
        let connection = ScriptedConnection(requestTimeout: .seconds(4), stallTimeout: .seconds(3600))
        connection.send("GET veh")
        connection.advance(by: .seconds(1))
        // The peer stops reading its replies: the output goes over its mark, and the next read
        // is the last before reading is held.
        connection.setWritable(false)
        connection.send("ic")
        #expect(!connection.reading, "reading is held while the output is over its mark")
        connection.advance(by: .seconds(6))
        #expect(connection.lines() == [], "the clock does not run while the agent holds reading")
        #expect(!connection.closed)
        connection.setWritable(true)
        #expect(connection.reading, "reading goes on once the output drains")
        connection.advance(by: .milliseconds(3999))
        #expect(connection.lines() == [], "the clock starts again, with its whole time")
        connection.advance(by: .milliseconds(1))
        #expect(connection.lines() == ["ERR bad-request request timed out"])
    }

    @Test func aPeerThatLeavesItsRepliesUnreadIsClosedAtTheStallTime() {
        let connection = ScriptedConnection(stallTimeout: .seconds(30))
        connection.setWritable(false)
        connection.send("PING\n")
        #expect(connection.lines() == [], "no reply is encoded while the output is over its mark")
        connection.advance(by: .seconds(29))
        #expect(!connection.closed)
        connection.setWritable(true)
        #expect(connection.lines() == ["PONG"])
        connection.setWritable(false)
        connection.advance(by: .seconds(29))
        #expect(!connection.closed, "each stall has its own 30 s")
        connection.advance(by: .seconds(1))
        #expect(connection.closed, "cut off at the stall time")
        #expect(!connection.transport.outputShut, "with no linger: the peer reads nothing")
        #expect(connection.transport.armedTimers == 0)
    }

    @Test func aHalfClosedClientIsAnsweredThenClosedWithoutLingering() async {
        let connection = ScriptedConnection()
        // An id not cached: its reply waits for a fetch; the PING after it waits behind it.
        connection.send("GET vehicle v-2\nPING\n")
        connection.endInput()
        #expect(connection.lines() == [])
        #expect(!connection.closed, "a half-closed client is still answered")
        await connection.finishFetches()
        let lines = connection.lines()
        #expect(lines.count == 2)
        #expect(lines.first?.hasPrefix("OK tok-v-2 ") == true)
        #expect(lines.last == "PONG")
        #expect(connection.closed)
        #expect(!connection.transport.outputShut, "nothing to drain: the client's input ended")
    }

    @Test func quitClosesAfterTheRepliesBeforeItAndDropsWhatFollows() {
        let connection = ScriptedConnection()
        connection.send("PING\nQUIT\nPING\n")
        #expect(connection.lines() == ["PONG"])
        #expect(connection.transport.outputShut)
        connection.endInput()
        #expect(connection.closed, "the client read the last reply and left")
        #expect(connection.lines() == [])
        #expect(connection.transport.armedTimers == 0, "the linger's timer is stopped with it")
    }

    @Test func atTheLimitOfRepliesOwedReadingIsHeldThenGoesOn() async {
        let connection = ScriptedConnection()
        connection.send("GET vehicle v-2\n" + String(repeating: "PING\n", count: RequestHandler.maxPending - 1))
        #expect(!connection.reading, "at \(RequestHandler.maxPending) owed replies, reading is held")
        connection.send("PING\n")
        #expect(connection.lines() == [], "replies keep request order behind the fetch")
        await connection.finishFetches()
        let lines = connection.lines()
        #expect(lines.count == RequestHandler.maxPending + 1, "every reply, the one read later too")
        #expect(connection.reading)
    }

    @Test func aCostlyReplyOverItsUIDsBudgetWaitsItsTurnAndTheRestWaitBehindIt() {
        // One unit a second: the first INFO is the second's budget; the next waits its turn.
        let connection = ScriptedConnection(costlyReplies: CostlyReplyPacer(unitsPerSecond: 1))
        connection.send("INFO vehicle v-1\nINFO vehicle v-1\nPING\n")
        let first = connection.lines()
        #expect(first.count == 1)
        #expect(first.first?.hasPrefix("OK cached=yes") == true)
        #expect(connection.transport.armedTimers == 1, "the pace timer")
        connection.advance(by: .seconds(Int64(1 + WorkCost.info + 1)))
        let rest = connection.lines()
        #expect(rest.count == 2)
        #expect(rest.last == "PONG")
        #expect(connection.transport.armedTimers == 0)
    }

    @Test func aConnectionOverTheLimitsIsToldWhyAndClosed() {
        let connection = ScriptedConnection(admission: .tooManyForUID(1000))
        #expect(connection.lines() == ["ERR busy too many connections for uid 1000"])
        connection.send("PING\n")
        #expect(connection.lines() == [], "no request is taken")
        connection.advance(by: .milliseconds(999))
        #expect(!connection.closed, "it lingers, so the client reads why")
        connection.advance(by: .milliseconds(1))
        #expect(connection.closed)
        #expect(connection.transport.armedTimers == 0)
    }

    @Test(arguments: [0, 5])
    func aTokenThatAgedUnderTheFloorWhileQueuedIsFetchedAgain(queuedSeconds: Int64) async throws {
        // A token with 12 s left, queued behind a fetch that takes `queuedSeconds`. After 5 s it
        // is under the 10 s serving floor when its turn comes: it is looked up again, and the
        // engine fetches a new one, which is what the peer gets.
        let connection = ScriptedConnection(tokenLifetime: 12)
        let cached = Int64(connection.time.wallSeconds) + 12
        connection.send("GET vehicle v-2\nGET vehicle v-1\n")
        connection.advance(by: .seconds(queuedSeconds))
        await connection.finishFetches()
        let lines = connection.lines()
        #expect(lines.count == 2)
        #expect(lines.first?.hasPrefix("OK tok-v-2 ") == true)
        let last = try #require(lines.last?.split(separator: " "))
        #expect(last.count == 3 && last[0] == "OK" && last[1] == "tok-v-1")
        let expiry = try #require(Int64(last[2]))
        if queuedSeconds == 0 {
            #expect(expiry == cached, "fresh enough: the cached token is served")
        } else {
            #expect(expiry > cached + 3000, "a new token, never the one under the floor")
        }
    }

    @Test func aPeerThatStopsReadingAfterQuitIsClosedAtTheStallTime() {
        let connection = ScriptedConnection(stallTimeout: .seconds(30))
        // The socket takes nothing more, though the output stays under its mark.
        connection.transport.holdOutput()
        connection.send("PING\nQUIT\n")
        connection.advance(by: .seconds(29))
        #expect(!connection.closed, "the last replies have the stall time")
        connection.advance(by: .seconds(1))
        #expect(connection.closed)
        #expect(!connection.transport.outputShut, "no linger for a peer that read nothing")
        #expect(connection.transport.armedTimers == 0)
    }

    @Test func aConnectionClosedWhileItsLastRepliesAreWrittenIsNeitherShutNorLingered() {
        let connection = ScriptedConnection()
        connection.transport.holdOutput()
        connection.send("PING\nQUIT\n")
        // The peer resets the connection before the socket took the last reply.
        connection.transport.close()
        connection.settle()
        #expect(!connection.transport.outputShut)
        #expect(connection.transport.armedTimers == 0)
        #expect(connection.handler.machine.state == .closed)
    }

    @Test func anIllegalTransitionClosesTheConnectionAndStopsItsTimers() {
        let connection = ScriptedConnection()
        connection.send("GET veh")
        #expect(connection.transport.armedTimers == 1, "the partial line's clock")
        // "Everything written" while open: no close was asked for.
        connection.handler.perform(connection.handler.machine.allWritten())
        connection.settle()
        #expect(connection.closed)
        #expect(connection.transport.armedTimers == 0)
        #expect(
            connection.handler.machine.state
                == .illegal(.init(event: "the last reply written", state: "open"))
        )
    }

    @Test func aPipelineLongerThanATurnIsAnsweredOverTwoTurnsInOrder() {
        let connection = ScriptedConnection()
        let count = RequestHandler.workPerTurn + 10
        connection.send(String(repeating: "GET vehicle v-1\n", count: count) + "PING\n")
        let lines = connection.lines()
        #expect(lines.count == count + 1)
        #expect(lines.last == "PONG")
        #expect(connection.transport.continuations == 1, "the rest waited for one later turn")
    }

    @Test func aLineOverTheLimitIsRefusedAndTheConnectionLingersThenCloses() {
        let connection = ScriptedConnection()
        connection.send("GET vehicle " + String(repeating: "x", count: 5000) + "\nPING\n")
        #expect(connection.lines() == ["ERR bad-request line too long"], "nothing after it is answered")
        #expect(connection.transport.outputShut)
        connection.advance(by: .seconds(1))
        #expect(connection.closed)
    }

    @Test func aTimerThatRunsAfterItWasCancelledDoesNothing() {
        // The transport runs cancelled timers anyway: only the arming's number keeps a stale one
        // from timing out a later partial line.
        let connection = ScriptedConnection(requestTimeout: .seconds(10))
        connection.transport.cancelsLate = true
        connection.send("GET veh")
        connection.advance(by: .seconds(5))
        connection.send("icle v-1\nPI")
        #expect(connection.lines().count == 1)
        connection.advance(by: .seconds(5))
        #expect(connection.lines() == [], "the first line's clock ran out, stale")
        #expect(!connection.closed)
        connection.advance(by: .milliseconds(4999))
        #expect(connection.lines() == [])
        connection.advance(by: .milliseconds(1))
        #expect(connection.lines() == ["ERR bad-request request timed out"], "the second line's own 10 s")
    }
}
