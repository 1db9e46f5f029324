import NIOCore
import Testing

@testable import TokenAgentServer

/// The connection's life as a value: each event in each state, and what it answers. No handler,
/// no transport, no time.
@Suite("Connection state machine")
struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine
    typealias Actions = ConnectionStateMachine.Actions

    private func machine() -> Machine {
        Machine(requestTimeout: .seconds(10), stallTimeout: .seconds(30), lingerTime: .seconds(1))
    }

    @Test func aPartialLineArmsItsClockAndTheLineThatEndsItCancelsIt() {
        var machine = machine()
        #expect(machine.partialLineRead() == Actions(arm: .partialLine))
        #expect(machine.delay(of: .partialLine) == .seconds(10))
        #expect(machine.partialLineRead() == .none, "the clock runs once, from the line's start")
        #expect(machine.lineEnded() == Actions(cancel: .partialLine))
        #expect(machine.lineEnded() == .none, "a whole line with no partial one before it costs nothing")
        #expect(machine.running == [])
    }

    @Test func theClockPausesWhileReadingIsHeldAndRestartsWhenItGoesOn() {
        var machine = machine()
        _ = machine.partialLineRead()
        #expect(machine.readingHeld() == Actions(cancel: .partialLine))
        #expect(machine.state == .open(.init(readHeld: true, partialLine: true)))
        #expect(machine.repliesWritten(nothingLeft: false, mayRead: false) == .none, "still held")
        #expect(
            machine.repliesWritten(nothingLeft: false, mayRead: true)
                == Actions(arm: .partialLine, step: .resumeReading)
        )
        #expect(machine.state == .open(.init(partialLine: true)))
    }

    @Test func aPartialLineThatRunsOutStopsTheConnectionWithAReply() {
        var machine = machine()
        _ = machine.partialLineRead()
        #expect(machine.timerFired(.partialLine, writable: true) == Actions(step: .partialLineTimedOut))
        #expect(machine.state.name.description == "finishing")
        #expect(!machine.takesRequests)
        #expect(machine.timerFired(.partialLine, writable: true) == .none, "a timer no longer running does nothing")
    }

    @Test func finishingClosesOnceNothingIsOwedThenLingersForAClientStillSending() {
        var machine = machine()
        #expect(machine.stop() == .none)
        #expect(machine.state.name.description == "finishing")
        #expect(machine.repliesWritten(nothingLeft: false, mayRead: true) == .none)
        #expect(
            machine.repliesWritten(nothingLeft: true, mayRead: true) == Actions(arm: .stall, step: .closeAfterWritten),
            "the last replies have the stall time to be written"
        )
        #expect(machine.state == .closing(inputEnded: false))
        #expect(machine.isClosed)
        #expect(machine.allWritten() == Actions(cancel: .stall, arm: .linger, step: .shutOutputAndLinger))
        #expect(machine.state == .lingering)
        #expect(machine.inputEnded() == Actions(cancel: .linger, step: .close), "the client read it and left")
        #expect(machine.state == .closed)
    }

    @Test func lingeringEndsAtItsTimeAtTheLatest() {
        var machine = machine()
        _ = machine.close()
        _ = machine.allWritten()
        #expect(machine.delay(of: .linger) == .seconds(1))
        #expect(machine.timerFired(.linger, writable: true) == Actions(step: .close))
        #expect(machine.state == .closed)
    }

    @Test func aClientThatEndedItsInputIsAnsweredThenClosedWithoutLingering() {
        var machine = machine()
        #expect(machine.inputEnded() == Actions(step: .writeReplies))
        #expect(machine.takesRequests, "a half-closed client's lines already read are still taken")
        #expect(machine.repliesWritten(nothingLeft: false, mayRead: true) == .none)
        #expect(
            machine.repliesWritten(nothingLeft: true, mayRead: true) == Actions(arm: .stall, step: .closeAfterWritten)
        )
        #expect(machine.allWritten() == Actions(cancel: .stall, step: .close))
        #expect(machine.state == .closed)
    }

    @Test func theEndOfInputWhileTheLastRepliesAreWrittenSkipsTheLinger() {
        var machine = machine()
        _ = machine.close()
        #expect(machine.inputEnded() == .none)
        #expect(machine.allWritten() == Actions(cancel: .stall, step: .close))
    }

    @Test func aPeerThatLeavesItsRepliesUnreadIsCutOffFromAnyState() {
        for closing in [false, true] {
            var machine = machine()
            #expect(machine.writabilityChanged(writable: false) == Actions(arm: .stall))
            #expect(machine.writabilityChanged(writable: false) == .none, "one clock")
            if closing { _ = machine.close() }
            #expect(machine.delay(of: .stall) == .seconds(30))
            #expect(machine.timerFired(.stall, writable: false) == Actions(step: .closeStalled))
            #expect(machine.state == .closed)
        }
    }

    @Test func aPeerThatReadsInTimeKeepsItsConnection() {
        var machine = machine()
        _ = machine.writabilityChanged(writable: false)
        #expect(machine.writabilityChanged(writable: true) == Actions(cancel: .stall, step: .writeReplies))
        _ = machine.writabilityChanged(writable: false)
        #expect(
            machine.timerFired(.stall, writable: true) == .none,
            "writable again when the clock ran out, before the news came"
        )
        #expect(machine.takesRequests)
    }

    @Test func aCostlyHeadOverItsBudgetWaitsForThePaceTimer() {
        var machine = machine()
        #expect(machine.costlyHead == .unpaid)
        #expect(machine.costlyHeadCharged(wait: .zero) == .none)
        #expect(machine.costlyHead == .paid)
        machine.costlyHeadWritten()
        #expect(machine.costlyHeadCharged(wait: .milliseconds(250)) == Actions(arm: .pace))
        #expect(machine.delay(of: .pace) == .milliseconds(250))
        #expect(machine.costlyHead == .waiting)
        #expect(machine.timerFired(.pace, writable: true) == Actions(step: .writeRepliesInNewTurn))
        #expect(machine.costlyHead == .paid)
    }

    @Test func oneContinuationAtATimeAndNoneOnceClosed() {
        var machine = machine()
        let asked = machine.askContinuation()
        let askedAgain = machine.askContinuation()
        #expect(asked)
        #expect(!askedAgain, "one is asked already")
        let came = machine.continuationCame()
        let askedAfter = machine.askContinuation()
        #expect(came)
        #expect(askedAfter)
        _ = machine.close()
        let cameClosed = machine.continuationCame()
        let askedClosed = machine.askContinuation()
        #expect(!cameClosed, "a continuation finds a closed connection and does nothing")
        #expect(!askedClosed)
    }

    @Test func theTransportClosingStopsEveryTimer() {
        var machine = machine()
        _ = machine.partialLineRead()
        _ = machine.writabilityChanged(writable: false)
        _ = machine.costlyHeadCharged(wait: .seconds(1))
        #expect(machine.transportClosed() == Actions(cancel: [.partialLine, .stall, .pace]))
        #expect(machine.state == .closed)
        #expect(machine.running == [])
        #expect(machine.inputEnded() == .none)
        #expect(machine.writabilityChanged(writable: true) == .none)
        #expect(machine.repliesWritten(nothingLeft: true, mayRead: true) == .none)
    }

    @Test func anEventThatCannotHappenIsAStateOfItsOwnNotATrap() {
        var machine = machine()
        _ = machine.writabilityChanged(writable: false)
        let actions = machine.allWritten()
        let transition = Machine.IllegalTransition(event: "the last reply written", state: "open")
        #expect(actions == Actions(cancel: .stall, step: .reportIllegal(transition)))
        #expect(machine.state == .illegal(transition))
        #expect(machine.isClosed)
        #expect(machine.running == [])

        var stopped = self.machine()
        _ = stopped.stop()
        #expect(stopped.lineEnded().step == .reportIllegal(.init(event: "a line", state: "finishing")))
        #expect(stopped.transportClosed() == .none)
        #expect(stopped.state == .illegal(.init(event: "a line", state: "finishing")), "the record stays")
    }

    @Test func stoppingTwiceOrAfterClosingChangesNothing() {
        var machine = machine()
        _ = machine.partialLineRead()
        #expect(machine.stop() == Actions(cancel: .partialLine))
        #expect(machine.stop() == .none)
        _ = machine.close()
        #expect(machine.stop() == .none)
        #expect(machine.close() == .none)
        #expect(machine.state == .closing(inputEnded: false))
    }

    @Test func closingIsBoundedByTheStallTimeWhateverTheOutputsMark() {
        var machine = machine()
        #expect(machine.close() == Actions(arm: .stall, step: .closeAfterWritten))
        #expect(machine.writabilityChanged(writable: true) == .none, "the bound runs on")
        #expect(machine.running == .stall)
        #expect(machine.timerFired(.stall, writable: true) == Actions(step: .closeStalled))
        #expect(machine.state == .closed)
    }

    @Test func whatComesAfterTheTransportClosedDoesNothing() {
        var machine = machine()
        _ = machine.close()
        #expect(machine.transportClosed() == Actions(cancel: .stall))
        #expect(machine.allWritten() == .none, "no shutting or lingering on a closed transport")
        #expect(machine.timerFired(.stall, writable: false) == .none)
        #expect(machine.timerFired(.linger, writable: true) == .none)
        #expect(machine.state == .closed)
    }
}
