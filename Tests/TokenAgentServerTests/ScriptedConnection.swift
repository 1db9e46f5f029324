import Logging
import NIOCore
import Synchronization
import TokenAgent

@testable import TokenAgentServer

/// Time the test moves by hand: the scripted transport's timers run on it, and the handler and
/// the engine read tokens' ages on it (as wall time from the machine's when it was made).
final class ScriptedTime: AgentClock, Sendable {
    private let elapsed = Mutex(TimeAmount.zero)
    /// The wall time at the start: the machine's, so tokens minted now are fresh.
    let epoch = SystemAgentClock().wallSeconds

    var now: TimeAmount { elapsed.withLock { $0 } }
    var monotonicSeconds: Double { 1000 + elapsedSeconds }
    var wallSeconds: Double { epoch + elapsedSeconds }
    private var elapsedSeconds: Double { Double(now.nanoseconds) / 1e9 }

    func move(to time: TimeAmount) { elapsed.withLock { $0 = max($0, time) } }
}

/// A ``ConnectionTransport`` the test plays by hand, with no socket and no real time: what the
/// handler writes is kept, timers run when the test moves ``ScriptedTime``, what the real loop
/// runs "soon" runs when the test lets it (``ScriptedConnection/settle()``), and fetches end
/// when the test ends them. It keeps `SocketConnection`'s order of events: the output's marks
/// and what waits for the output to be written are told in a later turn, and a close tells the
/// handler (``onClose``) before what waited for the output runs.
final class ScriptedTransport: ConnectionTransport {
    let time: ScriptedTime
    /// Everything the handler wrote, in order.
    private(set) var written: [UInt8] = []
    /// Whether the output is under its high-water mark; the test sets it.
    var isWritable = true
    /// Reading is held: the handler said it wants no more, and has not asked again.
    var readingHeld = false
    private(set) var closed = false
    private(set) var outputShut = false
    /// Bodies the real loop would run in a later turn.
    var soon: [() -> Void] = []
    /// Output the socket has not taken: while it is held (``holdOutput``), what waits for
    /// everything to be written waits.
    private(set) var outputHeld = false
    private var waitingForWritten: [() -> Void] = []
    /// Tells the handler its connection closed (the loop's `inactive`).
    var onClose: () -> Void = {}
    /// The fetches the handler waits for, in the order asked.
    var deliveries: [(wait: @Sendable () async -> TokenEngine.Outcome, body: (TokenEngine.Outcome) -> Void)] = []
    /// Timers armed and not yet run or cancelled, by deadline.
    private var timers: [(deadline: TimeAmount, id: Int, body: () -> Void)] = []
    private var nextTimer = 0
    private var cancelled: Set<Int> = []
    /// A cancelled timer still runs, as one that was already due when cancelled would.
    var cancelsLate = false
    /// Later turns asked for (``continueLater(_:)``).
    private(set) var continuations = 0

    init(time: ScriptedTime) { self.time = time }

    final class Timer: TransportTimer {
        let cancelBody: () -> Void
        init(_ cancel: @escaping () -> Void) { cancelBody = cancel }
        func cancel() { cancelBody() }
    }

    /// How many timers are armed.
    var armedTimers: Int { timers.count { !cancelled.contains($0.id) } }

    func write(_ bytes: UnsafeRawBufferPointer) {
        guard !closed else { return }
        written += bytes
    }

    func read() { readingHeld = false }

    func close() {
        guard !closed else { return }
        closed = true
        let bodies = waitingForWritten
        waitingForWritten = []
        soon.append { [self] in
            onClose()
            for body in bodies { body() }
        }
    }

    /// The socket stops taking the output (the peer does not read): what waits for it to be
    /// written waits.
    func holdOutput() { outputHeld = true }

    /// The socket takes the output held.
    func releaseOutput() {
        outputHeld = false
        soon += waitingForWritten
        waitingForWritten = []
    }

    func closeOutput() { outputShut = true }

    func whenWritten(_ body: @escaping () -> Void) {
        if outputHeld && !closed { waitingForWritten.append(body) } else { soon.append(body) }
    }

    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> any TransportTimer {
        nextTimer += 1
        let id = nextTimer
        timers.append((time.now + delay, id, body))
        return Timer { [weak self] in
            guard let self, !self.cancelsLate else { return }
            self.cancelled.insert(id)
        }
    }

    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        to body: @escaping (TokenEngine.Outcome) -> Void
    ) -> Task<Void, Never> {
        deliveries.append((wait, body))
        return Task {}
    }

    var socketDescriptor: Int32? { nil }

    func whenSocketWritable(_ body: @escaping () -> Void) { soon.append(body) }

    func continueLater(_ body: @escaping () -> Void) {
        continuations += 1
        soon.append(body)
    }

    /// The first timer due by `time`, removed; `nil` when none is.
    func takeDueTimer(by time: TimeAmount) -> (() -> Void, TimeAmount)? {
        timers.removeAll { cancelled.contains($0.id) }
        guard let next = timers.indices.min(by: { timers[$0].deadline < timers[$1].deadline }),
            timers[next].deadline <= time
        else { return nil }
        let timer = timers.remove(at: next)
        return (timer.body, timer.deadline)
    }
}

/// A ``RequestHandler`` with the real engine, served through a ``ScriptedTransport``: the test
/// is the peer, and the clock. No socket, no thread, no sleep: every step happens when the test
/// makes it, so the handler's behaviour in time is tested exactly.
final class ScriptedConnection {
    let time = ScriptedTime()
    let transport: ScriptedTransport
    let handler: RequestHandler
    let status: AgentStatus
    /// Bytes the peer sent that the handler has not read yet (reading held).
    private var unread: [UInt8] = []
    /// Bytes of ``ScriptedTransport/written`` already returned as lines.
    private var consumed = 0
    private var inputEnded = false

    init(
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(30),
        admission: ServerStatistics.Admission = .admitted,
        peer: PeerCredentials? = PeerCredentials(pid: 1, uid: 1000, gid: 1000),
        costlyReplies: CostlyReplyPacer = CostlyReplyPacer(),
        tokenLifetime: Double = 3600
    ) {
        transport = ScriptedTransport(time: time)
        let (engine, status) = handlerTestEngine(clock: time, tokenLifetime: tokenLifetime)
        self.status = status
        handler = RequestHandler(
            context: ConnectionContext(engine: engine, status: status, costlyReplies: costlyReplies),
            logger: Logger(label: "test"),
            admission: admission,
            peer: peer,
            requestTimeout: requestTimeout,
            stallTimeout: stallTimeout,
            clock: time
        )
        handler.transport = transport
        transport.onClose = { [weak handler] in handler?.inactive() }
        handler.activate()
        settle()
    }

    /// The peer sends `text`: read at once in one burst, or kept unread while reading is held.
    func send(_ text: String) {
        unread += Array(text.utf8)
        readUnread()
    }

    /// The peer shuts its sending side.
    func endInput() {
        inputEnded = true
        readUnread()
    }

    /// Reads what the peer sent, as the socket loop does: one burst, then whether to read on.
    private func readUnread() {
        guard !transport.closed, !transport.readingHeld else { return }
        if !unread.isEmpty {
            handler.startTurn()
            let bytes = unread
            unread = []
            bytes.withUnsafeBytes { handler.received($0) }
            handler.readComplete()
            if !transport.closed, !handler.wantsToRead() { transport.readingHeld = true }
        }
        if inputEnded, unread.isEmpty, !transport.readingHeld {
            inputEnded = false
            handler.readComplete()
            handler.inputEnded()
        }
        settle()
    }

    /// Runs what the loop would run soon, until nothing is left; a held read that was let go on
    /// reads what waits.
    func settle() {
        while !transport.soon.isEmpty {
            let bodies = transport.soon
            transport.soon = []
            for body in bodies { body() }
        }
        if !transport.readingHeld, !unread.isEmpty || inputEnded { readUnread() }
    }

    /// Moves time on by `amount`, running each timer due on the way at its own time.
    func advance(by amount: TimeAmount) {
        let end = time.now + amount
        while let (body, deadline) = transport.takeDueTimer(by: end) {
            time.move(to: deadline)
            body()
            settle()
        }
        time.move(to: end)
    }

    /// The output goes over its high-water mark (the peer stops reading), or back under it.
    func setWritable(_ writable: Bool) {
        transport.isWritable = writable
        transport.soon.append { [handler] in handler.writabilityChanged() }
        settle()
    }

    /// Ends every fetch the handler waits for, as the engine ends it.
    func finishFetches() async {
        while !transport.deliveries.isEmpty {
            let deliveries = transport.deliveries
            transport.deliveries = []
            for delivery in deliveries { delivery.body(await delivery.wait()) }
            settle()
        }
    }

    /// The reply lines written since the last call.
    func lines() -> [String] {
        let bytes = transport.written[consumed...]
        guard let last = bytes.lastIndex(of: UInt8(ascii: "\n")) else { return [] }
        consumed = last + 1
        return bytes[..<last].split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
            .map { String(decoding: $0, as: UTF8.self) }
    }

    /// Whether the handler closed the connection.
    var closed: Bool { transport.closed }
    /// Whether the handler is reading (not holding reading for back-pressure).
    var reading: Bool { !transport.readingHeld }
}
