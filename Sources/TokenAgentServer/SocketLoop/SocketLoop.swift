import CSocketLoop
import Logging
import NIOCore
import Synchronization
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// One thread that serves the agent's Unix socket with epoll: it accepts on the listening
/// sockets, reads, frames and answers requests, and writes replies, with no other thread in the
/// path of a cached GET. Work from other threads (a fetch that ended) comes in through
/// ``execute(_:)``, which wakes the loop through an eventfd.
///
/// Why not SwiftNIO's event loop: on the standard machine (2 cores) a bare epoll loop in Swift on
/// one thread answers 1.34x what Redis does, where SwiftNIO's path per read and flush alone costs
/// about 11,500 instructions a GET (docs/BENCHMARKS-METHOD.md, "Where the socket's floor is").
///
/// Fairness: the loop serves in turns. A connection does a bounded amount of work each time its
/// events are handled (``RequestHandler/workPerTurn``); a connection with work left asks to go on
/// with ``continueLater(_:)``, which runs after the loop has looked at every other descriptor once
/// more. So one peer that pipelines costly requests delays the others by one turn of its, not by
/// everything it sent.
///
/// Everything but ``execute(_:)``, ``answers(within:)``, ``ended()`` and ``start(name:)`` is
/// called on the loop's own thread.
final class SocketLoop: @unchecked Sendable {
    /// What a registered descriptor is, kept in its epoll event's data word with its number (the
    /// low 32 bits), the tag (the next 8) and, for a connection, its generation (the top 24), so
    /// an event still in a batch for a connection closed earlier in that batch is not delivered to
    /// a new connection that got the same descriptor number.
    private enum Tag: UInt64 {
        case wake = 1
        case listener = 2
        case connection = 3
    }

    /// The epoll instance.
    let epoll: Int32
    private let wake: Int32
    private let logger: Logger

    // The loop thread's own state.
    /// The connections served, by socket, each retained once by the loop (``add(_:)``) and
    /// released after ``remove(_:)``: an event borrows its connection, with no count changed.
    private var connections: [Unmanaged<SocketConnection>?] = []
    private(set) var connectionCount = 0
    private var timers = LoopTimers()
    /// Work to run once the current event is handled (before the loop waits again).
    private var soon: [() -> Void] = []
    /// Work to run after the loop has looked at every descriptor once more (``continueLater(_:)``).
    private var later: [() -> Void] = []
    /// The generation the next connection gets (24 bits, wrapping).
    private var nextGeneration: UInt32 = 0
    private var listeners: [Int32: (Int32) -> Void] = [:]
    private var running = true
    /// Scratch for reads, ``SocketConnection/readSize`` bytes: each connection's read goes here
    /// first, lent to its handler for the call.
    let readStorage: UnsafeMutableRawPointer

    // Shared with other threads.
    private struct Job: @unchecked Sendable { var body: () -> Void }
    /// Work from other threads; `nil` once the loop's thread has ended.
    private let inbox = Mutex<[Job]?>([])
    /// Those waiting in ``ended()`` for the loop's thread to end, by number, and the numbers of
    /// those cancelled before they waited.
    private struct Waiters {
        var waiting: [Int: CheckedContinuation<Void, Never>] = [:]
        var cancelled: Set<Int> = []
    }
    private let stopped = Mutex(Waiters())
    private let waiters = Atomic(0)
    private let finished = Atomic<Bool>(false)
    /// Why the loop ended on its own (not through ``stop()``); set before ``finished``.
    private let failure = Mutex<String?>(nil)
    /// Probes of ``answers(within:)``: the last sent, and the last the loop ran.
    private let probesSent = Atomic(0)
    private let probesRun = Atomic(0)

    init(logger: Logger) throws {
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        let epollError = errno
        let wake = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        guard epoll >= 0, wake >= 0 else {
            // Thrown before every property is set: no deinit runs, so each is closed here.
            let error = epoll < 0 ? epollError : errno
            if epoll >= 0 { Glibc.close(epoll) }
            if wake >= 0 { Glibc.close(wake) }
            throw SocketPath.Problem(description: "cannot start the socket loop: \(String(cString: strerror(error)))")
        }
        self.epoll = epoll
        self.wake = wake
        self.logger = logger
        readStorage = .allocate(byteCount: SocketConnection.readSize, alignment: 16)
        _ = register(wake, tag: .wake, events: EPOLLIN.rawValue)
    }

    deinit {
        for connection in connections { connection?.release() }
        readStorage.deallocate()
        Glibc.close(epoll)
        Glibc.close(wake)
    }

    /// Starts the loop's thread. `name` is what `top -H`, perf and crash reports show; Linux
    /// takes at most 15 bytes of it.
    func start(name: String) {
        DetachedThread.start { [self] in
            // The thread names itself. (A name over 15 bytes is refused: the thread keeps the
            // name it inherited.)
            _ = fsl_name_thread(name)
            run()
            closeEverything()
            // Work sent from now on runs on its sender's thread (nothing else runs the loop's
            // state any more); work sent before it ended runs here.
            let left = inbox.withLock { jobs -> [Job] in
                defer { jobs = nil }
                return jobs ?? []
            }
            for job in left {
                job.body()
                runSoonWork()
            }
            finished.store(true, ordering: .releasing)
            let waiting = stopped.withLock { state in
                defer { state = Waiters() }
                return Array(state.waiting.values)
            }
            for continuation in waiting { continuation.resume() }
        }
    }

    /// Runs `body` on the loop's thread, from any thread; once the loop has ended, on the
    /// caller's own.
    func execute(_ body: @escaping () -> Void) {
        let queued = inbox.withLock { jobs -> Bool? in
            guard jobs != nil else { return nil }
            jobs!.append(Job(body: body))
            return jobs!.count == 1
        }
        guard let queued else {
            body()
            return
        }
        if queued {
            var one: UInt64 = 1
            _ = Glibc.write(wake, &one, 8)
        }
    }

    /// Whether the loop runs a task within `seconds`, from any thread: a loop stuck in one
    /// piece of work does not, nor one that has ended. (A probe is a counter the loop raises,
    /// polled here, so a loop that never answers leaves no waiter behind.)
    func answers(within seconds: Double) async -> Bool {
        if finished.load(ordering: .acquiring) { return false }
        let probe = probesSent.add(1, ordering: .relaxed).newValue
        execute { [self] in
            if probesRun.load(ordering: .relaxed) < probe { probesRun.store(probe, ordering: .releasing) }
        }
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while probesRun.load(ordering: .acquiring) < probe {
            guard ContinuousClock.now < deadline, !finished.load(ordering: .acquiring) else { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }

    /// Stops the loop once it has run what it was given, and waits for its thread to end.
    func stop() async {
        execute { [self] in running = false }
        await ended()
    }

    /// Waits for the loop's thread to end (by ``stop()`` or on its own), or for the waiting task
    /// to be cancelled, and says why the loop ended on its own: `nil` after ``stop()`` or when
    /// cancelled first.
    @discardableResult
    func ended() async -> String? {
        let waiter = waiters.add(1, ordering: .relaxed).newValue
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = stopped.withLock { state -> Bool in
                    if finished.load(ordering: .acquiring) || state.cancelled.remove(waiter) != nil { return true }
                    state.waiting[waiter] = continuation
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            let continuation = stopped.withLock { state -> CheckedContinuation<Void, Never>? in
                if let continuation = state.waiting.removeValue(forKey: waiter) { return continuation }
                if !finished.load(ordering: .acquiring) { state.cancelled.insert(waiter) }
                return nil
            }
            continuation?.resume()
        }
        return finished.load(ordering: .acquiring) ? failure.withLock { $0 } : nil
    }

    // MARK: On the loop's thread

    /// Watches a listening socket: `accept` runs with each connection accepted on it.
    func addListener(_ socket: Int32, accept: @escaping (Int32) -> Void) {
        listeners[socket] = accept
        if !register(socket, tag: .listener, events: EPOLLIN.rawValue) {
            logger.critical(
                "cannot watch the listening socket",
                metadata: ["error": "\(String(cString: strerror(errno)))"]
            )
        }
    }

    /// Stops watching a listening socket and closes it.
    func closeListener(_ socket: Int32) {
        guard listeners.removeValue(forKey: socket) != nil else { return }
        epoll_ctl(epoll, EPOLL_CTL_DEL, socket, nil)
        Glibc.close(socket)
    }

    /// Every listening socket watched.
    var listenerSockets: [Int32] { Array(listeners.keys) }

    /// Serves `connection` from now on, under a generation of its own.
    func add(_ connection: SocketConnection) {
        let socket = Int(connection.socket)
        connection.generation = nextGeneration
        nextGeneration = (nextGeneration &+ 1) & 0xFF_FFFF
        if socket >= connections.count {
            connections.append(contentsOf: repeatElement(nil, count: socket + 1 - connections.count))
        }
        connections[socket] = Unmanaged.passRetained(connection)
        connectionCount += 1
        if !control(
            EPOLL_CTL_ADD,
            connection.socket,
            tag: .connection,
            generation: connection.generation,
            events: connection.interest
        ) {
            // Out of epoll watches (fs.epoll.max_user_watches): the connection could never be
            // served.
            logger.error("cannot watch a connection", metadata: ["error": "\(String(cString: strerror(errno)))"])
            connection.close()
        }
    }

    /// Stops serving `connection` (before its socket is closed).
    func remove(_ connection: SocketConnection) {
        let socket = Int(connection.socket)
        guard socket < connections.count, let held = connections[socket],
            held.toOpaque() == Unmanaged.passUnretained(connection).toOpaque()
        else { return }
        connections[socket] = nil
        connectionCount -= 1
        epoll_ctl(epoll, EPOLL_CTL_DEL, connection.socket, nil)
        // Released once the current event is handled: the event that closed it borrows it.
        runSoon { held.release() }
    }

    /// Every connection served.
    var openConnections: [SocketConnection] { connections.compactMap { $0?.takeUnretainedValue() } }

    /// Changes the events watched on a connection's socket.
    func watch(_ connection: SocketConnection, events: UInt32) {
        control(EPOLL_CTL_MOD, connection.socket, tag: .connection, generation: connection.generation, events: events)
    }

    /// Runs `body` after the current event is handled.
    func runSoon(_ body: @escaping () -> Void) { soon.append(body) }

    /// Runs `body` in a turn of its own once the loop has looked at every descriptor once more
    /// and served what was ready: for a connection that used up its turn with work left.
    func continueLater(_ body: @escaping () -> Void) { later.append(body) }

    /// Starts a timer.
    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> LoopTimer {
        timers.start(at: NIODeadline.now().uptimeNanoseconds &+ UInt64(max(0, delay.nanoseconds)), body)
    }

    /// Watches `socket`; `false` when epoll refused it.
    private func register(_ socket: Int32, tag: Tag, events: UInt32) -> Bool {
        control(EPOLL_CTL_ADD, socket, tag: tag, events: events)
    }

    /// `epoll_ctl` for `socket`, its number, `tag` and `generation` in the event's data word;
    /// `false` when epoll refused it.
    @discardableResult
    private func control(
        _ operation: Int32,
        _ socket: Int32,
        tag: Tag,
        generation: UInt32 = 0,
        events: UInt32
    ) -> Bool {
        let data = UInt64(UInt32(bitPattern: socket)) | tag.rawValue << 32 | UInt64(generation & 0xFF_FFFF) << 40
        var event = fsl_event(events, data)
        return epoll_ctl(epoll, operation, socket, &event) == 0
    }

    private func run() {
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while running {
            // The continuations asked for before this wait run after what it finds ready.
            let continuations = later
            later = []
            var timeout: Int32 = -1
            if !soon.isEmpty || !continuations.isEmpty {
                timeout = 0
            } else if let deadline = timers.nextDeadline() {
                let now = NIODeadline.now().uptimeNanoseconds
                timeout = deadline <= now ? 0 : Int32(min((deadline - now + 999_999) / 1_000_000, 60_000))
            }
            let ready = epoll_wait(epoll, events, Int32(capacity), timeout)
            if ready < 0, errno != EINTR {
                // Not expected with a valid descriptor and buffer: the loop ends, closing every
                // connection, rather than spin; the server's service then fails, and so the agent.
                let error = "epoll_wait failed: \(String(cString: strerror(errno)))"
                logger.critical("socket loop ended", metadata: ["error": "\(error)"])
                failure.withLock { $0 = error }
                return
            }
            for index in 0..<max(0, Int(ready)) {
                let data = fsl_event_data(events + index)
                let socket = Int32(bitPattern: UInt32(truncatingIfNeeded: data))
                switch Tag(rawValue: (data >> 32) & 0xFF) {
                case .connection:
                    if Int(socket) < connections.count, let connection = connections[Int(socket)],
                        connection._withUnsafeGuaranteedRef({ $0.generation }) == UInt32(truncatingIfNeeded: data >> 40)
                    {
                        let ready = events[index].events
                        connection._withUnsafeGuaranteedRef { $0.handle(events: ready) }
                    } else {
                        // Closed earlier in this batch, its descriptor number perhaps reused.
                        logger.debug(
                            "dropped an event for a closed connection",
                            metadata: ["descriptor": "\(socket)"]
                        )
                    }
                case .listener:
                    if let accept = listeners[socket] { acceptAll(on: socket, accept) }
                case .wake:
                    var count: UInt64 = 0
                    _ = Glibc.read(wake, &count, 8)
                    runInbox()
                case nil: break
                }
                runSoonWork()
            }
            let due = timers.takeDue(now: NIODeadline.now().uptimeNanoseconds)
            for timer in due {
                timer.fire()
                runSoonWork()
            }
            for body in continuations {
                body()
                runSoonWork()
            }
            runSoonWork()
        }
    }

    /// When the loop ends: every connection and listening socket is closed.
    private func closeEverything() {
        for connection in openConnections { connection.close() }
        runSoonWork()
        for socket in listenerSockets { closeListener(socket) }
    }

    private func runInbox() {
        let jobs = inbox.withLock { jobs -> [Job] in
            let taken = jobs ?? []
            jobs?.removeAll(keepingCapacity: true)
            return taken
        }
        for job in jobs {
            job.body()
            runSoonWork()
        }
    }

    private func runSoonWork() {
        while !soon.isEmpty {
            let work = soon
            soon.removeAll(keepingCapacity: true)
            for body in work { body() }
        }
    }

    /// The last time accepting failed for want of descriptors or memory, to log it once a minute.
    private var lastAcceptFailureLog: UInt64 = 0

    private func acceptAll(on listener: Int32, _ accept: (Int32) -> Void) {
        for _ in 0..<64 {
            let socket = fsl_accept(listener)
            if socket >= 0 {
                accept(socket)
                runSoonWork()
                continue
            }
            switch errno {
            case EINTR, ECONNABORTED: continue
            case EAGAIN: return
            default:
                // Out of descriptors or memory: the connection waits in the queue; stop watching
                // the listener for a moment rather than spin on it.
                let error = String(cString: strerror(errno))
                let now = NIODeadline.now().uptimeNanoseconds
                if now &- lastAcceptFailureLog >= 60_000_000_000 || lastAcceptFailureLog == 0 {
                    lastAcceptFailureLog = now
                    logger.error("cannot accept connections", metadata: ["error": "\(error)"])
                }
                control(EPOLL_CTL_MOD, listener, tag: .listener, events: 0)
                _ = schedule(in: .milliseconds(100)) { [self] in
                    guard listeners[listener] != nil else { return }
                    control(EPOLL_CTL_MOD, listener, tag: .listener, events: EPOLLIN.rawValue)
                }
                return
            }
        }
    }
}
