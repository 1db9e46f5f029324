import NIOCore

/// The life of one connection, as a value: where it is (taking requests, finishing, closing,
/// lingering, closed), with the data each of those states needs, moved only by events and
/// answering each with the actions its driver performs. It does no I/O and reads no clock: the
/// ``RequestHandler`` feeds it what happened (a line read, the output's writability, a timer, the
/// end of input, a stop) and performs what it returns (arm or cancel a timer, resume reading,
/// write the replies owed, close, shut the sending side and linger), so every transition can be
/// tested without a socket or a sleep.
///
/// What the requests mean (verbs, access checks, the engine) is not its business, and neither are
/// the replies owed themselves: the handler keeps them in request order and tells the machine
/// what it needs of them (whether any are owed, whether reading may go on).
///
/// An event that cannot happen in the state it comes in (a line taken after the connection
/// stopped taking requests, the last reply written while it was still open) is not a trap: the
/// machine moves to ``State/illegal(_:)``, which is closed, and says so in its action, so the
/// driver logs it and closes the connection while the agent serves everyone else.
struct ConnectionStateMachine {
    /// The timers a connection runs, as a set.
    struct Timers: OptionSet, Equatable {
        let rawValue: UInt8
        /// A partial line's wait for its end (the request time-out), while reading is not held.
        static let partialLine = Timers(rawValue: 1 << 0)
        /// The peer's replies left unread (the stall time-out): while the output is over its mark,
        /// and while closing, however few bytes of the last replies are left.
        static let stall = Timers(rawValue: 1 << 1)
        /// The costly reply at the head waits for its uid's turn (``CostlyReplyPacer``).
        static let pace = Timers(rawValue: 1 << 2)
        /// After the last reply, the client's input is read and dropped for at most this long.
        static let linger = Timers(rawValue: 1 << 3)

        /// Every timer, in a fixed order.
        static let all: [Timers] = [.partialLine, .stall, .pace, .linger]
    }

    /// Where the costly reply at the head of the replies owed is with its uid's budget.
    enum CostlyHead: Equatable {
        /// Not charged yet (or no costly reply at the head).
        case unpaid
        /// Charged, and over the budget: it waits for the pace timer.
        case waiting
        /// Charged and within the budget: it may be written.
        case paid
    }

    /// A connection that still writes replies: taking requests, or finishing.
    struct Serving: Equatable {
        /// The client's end of input came. A half-closed client is still answered; it decides
        /// whether closing lingers.
        var inputEnded = false
        /// Reading is held for back-pressure until the replies owed, the lines kept and the
        /// output allow it again.
        var readHeld = false
        /// A partial line waits for its end; its clock runs while reading is not held.
        var partialLine = false
        /// The costly reply at the head, as far as its uid's budget goes.
        var costlyHead = CostlyHead.unpaid
        /// A later turn is asked for and has not come (at most one is).
        var continuationAsked = false
    }

    /// An event that could not happen in the state it came in. (Static strings: a trivial value,
    /// so the states and actions that carry it copy as plain bytes on the hot path.)
    struct IllegalTransition: Equatable, CustomStringConvertible {
        /// The event.
        let event: StaticString
        /// The state it came in.
        let state: StaticString

        var description: String { "\(event) while \(state)" }

        static func == (lhs: Self, rhs: Self) -> Bool {
            lhs.event.description == rhs.event.description && lhs.state.description == rhs.state.description
        }
    }

    /// Where the connection is in its life. It only moves forward, in this order, though it may
    /// skip states: a stalled peer is closed from any state, and a connection whose transport
    /// closed is closed whatever it was doing.
    enum State: Equatable {
        /// Taking requests.
        case open(Serving)
        /// Taking no more requests; the connection closes once every reply owed is written. After
        /// `QUIT`, a too-long or timed-out line, or a refused connection (the reply that ends it
        /// closes it when it reaches the head), and on graceful shutdown.
        case finishing(Serving)
        /// The last reply is handed to the transport: once it is written the connection closes,
        /// or lingers if the client may still be sending.
        case closing(inputEnded: Bool)
        /// After the last reply: our side is shut, and the client's input is read and dropped
        /// until it ends (or the linger time): closing with unread input would reset the
        /// connection and could destroy replies the client has not read.
        case lingering
        /// Closed: the transport said so, or a peer that left its replies unread was cut off.
        case closed
        /// An event came that cannot happen where the connection was: closed, and logged.
        case illegal(IllegalTransition)

        var name: StaticString {
            switch self {
            case .open: "open"
            case .finishing: "finishing"
            case .closing: "closing"
            case .lingering: "lingering"
            case .closed: "closed"
            case .illegal: "illegal"
            }
        }
    }

    /// What the driver does after an event, besides the timers.
    enum Step: Equatable {
        /// Nothing more.
        case none
        /// Write the replies that are ready, in order (and take the lines kept).
        case writeReplies
        /// Start a new turn of work, then write the replies that are ready.
        case writeRepliesInNewTurn
        /// Let the transport read again.
        case resumeReading
        /// Hand the output over; call ``allWritten()`` once the transport has written it.
        case closeAfterWritten
        /// Shut our sending side and read on, dropping what comes, until the linger timer.
        case shutOutputAndLinger
        /// Close the transport now.
        case close
        /// The peer left its replies unread for the stall time: log it and close now.
        case closeStalled
        /// A partial line waited its request time-out: tell the client so; the connection
        /// finishes (the reply closes it).
        case partialLineTimedOut
        /// An illegal transition: log it and close now.
        case reportIllegal(IllegalTransition)
    }

    /// The actions one event asks for: timers to cancel, then to arm, then one step.
    struct Actions: Equatable {
        var cancel: Timers = []
        var arm: Timers = []
        var step = Step.none

        static let none = Actions()
    }

    /// How long a partial line may wait for its end while reading.
    let requestTimeout: TimeAmount
    /// How long the peer may leave its replies unread before it is closed.
    let stallTimeout: TimeAmount
    /// How long the client's input is drained after the last reply.
    let lingerTime: TimeAmount

    /// Where the connection is.
    private(set) var state = State.open(Serving())
    /// The timers running; the driver holds their handles.
    private(set) var running: Timers = []
    /// How long the costly reply at the head waits for its turn, once charged over the budget.
    private(set) var paceWait = TimeAmount.zero

    init(requestTimeout: TimeAmount, stallTimeout: TimeAmount, lingerTime: TimeAmount = .seconds(1)) {
        self.requestTimeout = requestTimeout
        self.stallTimeout = stallTimeout
        self.lingerTime = lingerTime
    }

    /// How long `timer` runs, once armed.
    func delay(of timer: Timers) -> TimeAmount {
        switch timer {
        case .partialLine: requestTimeout
        case .stall: stallTimeout
        case .pace: paceWait
        default: lingerTime
        }
    }

    // MARK: Queries

    /// Whether requests are taken: only while open.
    var takesRequests: Bool {
        if case .open = state { return true }
        return false
    }

    /// Whether no more reply goes out: the last is handed over, or the connection is gone.
    var isClosed: Bool {
        switch state {
        case .open, .finishing: false
        case .closing, .lingering, .closed, .illegal: true
        }
    }

    /// The costly reply at the head, as far as its uid's budget goes.
    var costlyHead: CostlyHead {
        switch state {
        case .open(let serving), .finishing(let serving): serving.costlyHead
        default: .unpaid
        }
    }

    // MARK: Events: reading

    /// The framer holds a partial line: its clock starts, unless reading is held.
    mutating func partialLineRead() -> Actions {
        guard case .open(var serving) = state else { return illegal("a partial line") }
        serving.partialLine = true
        state = .open(serving)
        return serving.readHeld ? .none : arm(.partialLine)
    }

    /// A line ended (a whole line, or one over the limit): a partial line's clock stops.
    @inline(__always)
    mutating func lineEnded() -> Actions {
        guard case .open(var serving) = state else { return illegal("a line") }
        guard serving.partialLine else { return .none }
        serving.partialLine = false
        state = .open(serving)
        return cancel(.partialLine)
    }

    /// Reading pauses for back-pressure: a partial line's clock pauses with it (the client is not
    /// the one holding the line up).
    mutating func readingHeld() -> Actions {
        guard updateServing({ $0.readHeld = true }) else { return .none }
        return cancel(.partialLine)
    }

    /// The client's end of input came.
    mutating func inputEnded() -> Actions {
        if updateServing({ $0.inputEnded = true }) { return Actions(step: .writeReplies) }
        switch state {
        case .closing:
            // The close follows the replies still being written; nothing to drain after them.
            state = .closing(inputEnded: true)
            return .none
        case .lingering:
            // The client read our last reply and closed its side.
            return closeNow(.close)
        default:
            return .none
        }
    }

    // MARK: Events: replies

    /// Takes no more requests: after `QUIT`, a too-long line, a refused connection, on graceful
    /// shutdown. The connection closes once every reply owed is written.
    mutating func stop() -> Actions {
        guard case .open(var serving) = state else { return .none }
        serving.partialLine = false
        state = .finishing(serving)
        return cancel(.partialLine)
    }

    /// The replies ready were written as far as they could be. `nothingLeft`: no reply is owed
    /// and no line waits; `mayRead`: the replies owed, the lines kept and the output allow
    /// reading, asked only when reading is held (it costs the driver a look at its output). Closes
    /// a connection that is done, or lets a held read go on.
    @inline(__always)
    mutating func repliesWritten(nothingLeft: Bool, mayRead: @autoclosure () -> Bool) -> Actions {
        switch state {
        case .open(var serving):
            if serving.inputEnded && nothingLeft { return close() }
            guard serving.readHeld, mayRead() else { return .none }
            serving.readHeld = false
            state = .open(serving)
            var actions = Actions(step: .resumeReading)
            if serving.partialLine, !running.contains(.partialLine) {
                running.insert(.partialLine)
                actions.arm = .partialLine
            }
            return actions
        case .finishing(var serving):
            if nothingLeft { return close() }
            guard serving.readHeld, mayRead() else { return .none }
            serving.readHeld = false
            state = .finishing(serving)
            return Actions(step: .resumeReading)
        default:
            return .none
        }
    }

    /// The output crossed its high- or low-water mark: a peer that leaves its replies unread has
    /// the stall time to read them.
    mutating func writabilityChanged(writable: Bool) -> Actions {
        if case .closed = state { return .none }
        if case .illegal = state { return .none }
        // Closing, the stall timer bounds the last replies' writing: it runs on, whatever the
        // output's mark does.
        if case .closing = state { return writable ? .none : arm(.stall) }
        if writable {
            var actions = cancel(.stall)
            actions.step = .writeReplies
            return actions
        }
        return arm(.stall)
    }

    /// The costly reply at the head was charged against its uid's budget: over it, it waits
    /// `wait` for its turn.
    mutating func costlyHeadCharged(wait: TimeAmount) -> Actions {
        let waits = wait > .zero
        guard updateServing({ $0.costlyHead = waits ? .waiting : .paid }) else { return .none }
        guard waits else { return .none }
        paceWait = wait
        return arm(.pace)
    }

    /// The costly reply at the head was written: the next is charged when it comes.
    mutating func costlyHeadWritten() {
        _ = updateServing { $0.costlyHead = .unpaid }
    }

    /// Asks for a later turn; `false` when one is asked already, or the connection is closed.
    mutating func askContinuation() -> Bool {
        var asked = false
        _ = updateServing {
            asked = !$0.continuationAsked
            $0.continuationAsked = true
        }
        return asked
    }

    /// The later turn came: `true` when the connection still writes replies.
    mutating func continuationCame() -> Bool {
        updateServing { $0.continuationAsked = false }
    }

    // MARK: Events: closing

    /// The last reply is in the output: hand it over, and close once it is written (within the
    /// stall time).
    mutating func close() -> Actions {
        let inputEnded: Bool
        switch state {
        case .open(let serving), .finishing(let serving): inputEnded = serving.inputEnded
        default: return .none
        }
        state = .closing(inputEnded: inputEnded)
        var actions = cancel(.partialLine)
        // The last replies get the stall time to be written, however little of them is unsent: a
        // peer that stops reading after QUIT holds its connection no longer than that.
        actions.arm = arm(.stall).arm
        actions.step = .closeAfterWritten
        return actions
    }

    /// Everything handed over before closing is written: close, or linger while the client may
    /// still be sending.
    mutating func allWritten() -> Actions {
        switch state {
        case .closing(inputEnded: true):
            return closeNow(.close)
        case .closing(inputEnded: false):
            state = .lingering
            var actions = cancel(.stall)
            actions.arm = arm(.linger).arm
            actions.step = .shutOutputAndLinger
            return actions
        case .closed, .illegal:
            return .none
        case .open, .finishing, .lingering:
            return illegal("the last reply written")
        }
    }

    /// `timer` ran out. `writable`: the output is under its high-water mark.
    mutating func timerFired(_ timer: Timers, writable: Bool) -> Actions {
        // A timer cancelled in the same turn as it ran out is no longer the connection's.
        guard running.contains(timer) else { return .none }
        running.remove(timer)
        switch timer {
        case .partialLine:
            guard case .open(let serving) = state, serving.partialLine else { return .none }
            var actions = stop()
            actions.step = .partialLineTimedOut
            return actions
        case .stall:
            // Closing, the last replies had their time whatever the output's mark says.
            if case .closing = state { return closeNow(.closeStalled) }
            if writable || isClosedForGood { return .none }
            return closeNow(.closeStalled)
        case .pace:
            guard updateServing({ $0.costlyHead = .paid }) else { return .none }
            return Actions(step: .writeRepliesInNewTurn)
        default:
            guard case .lingering = state else { return .none }
            return closeNow(.close)
        }
    }

    /// The transport is closed: every timer stops.
    mutating func transportClosed() -> Actions {
        if case .illegal = state {} else { state = .closed }
        let actions = Actions(cancel: running)
        running = []
        return actions
    }

    // MARK: Helpers

    private var isClosedForGood: Bool {
        switch state {
        case .closed, .illegal: true
        default: false
        }
    }

    /// Closes now, stopping every timer: `step` says how.
    private mutating func closeNow(_ step: Step) -> Actions {
        state = .closed
        let actions = Actions(cancel: running, step: step)
        running = []
        return actions
    }

    private mutating func illegal(_ event: StaticString) -> Actions {
        let transition = IllegalTransition(event: event, state: state.name)
        state = .illegal(transition)
        let actions = Actions(cancel: running, step: .reportIllegal(transition))
        running = []
        return actions
    }

    private mutating func arm(_ timer: Timers) -> Actions {
        guard !running.contains(timer) else { return .none }
        running.insert(timer)
        return Actions(arm: timer)
    }

    private mutating func cancel(_ timer: Timers) -> Actions {
        guard running.contains(timer) else { return .none }
        running.remove(timer)
        return Actions(cancel: timer)
    }

    /// Changes the serving state's data, if the connection still writes replies.
    private mutating func updateServing(_ change: (inout Serving) -> Void) -> Bool {
        switch state {
        case .open(var serving):
            change(&serving)
            state = .open(serving)
        case .finishing(var serving):
            change(&serving)
            state = .finishing(serving)
        default:
            return false
        }
        return true
    }
}
