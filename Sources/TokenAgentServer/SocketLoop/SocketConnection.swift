import CSocketLoop
import NIOCore
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// One accepted connection on a ``SocketLoop``: the transport of its ``RequestHandler``. It
/// reads at most ``readsPerBurst`` reads of ``readSize`` bytes before the handler's replies are
/// written and it is asked whether to read on (so what a connection reads before it must stop is
/// at most 64 KiB), keeps what the socket did not take of its replies (bounded by the handler,
/// which encodes replies only while this is under ``highWaterMark``), and watches the socket for
/// output only while such bytes wait.
final class SocketConnection: ConnectionTransport {
    /// The most bytes one read takes.
    static let readSize = 16 * 1024
    /// The most reads before the replies they made ready are written.
    static let readsPerBurst = 4
    /// Output waiting for the socket at or over this makes the connection unwritable...
    static let highWaterMark = 64 * 1024
    /// ...and under this, writable again.
    static let lowWaterMark = 32 * 1024

    let socket: Int32
    /// Set by the loop when it starts serving the connection: told apart from a later connection
    /// on the same descriptor number by it.
    var generation: UInt32 = 0
    /// The loop, which holds every connection it serves for as long as it runs: borrowed, never
    /// retained (a read burst would otherwise retain it for each use of its read buffer).
    private let loopReference: Unmanaged<SocketLoop>
    private var loop: SocketLoop { loopReference.takeUnretainedValue() }
    /// The handler served; dropped once the connection is closed and the handler told (it keeps
    /// this transport for the closures it handed out, so the two must not hold each other).
    private(set) var handler: RequestHandler? {
        didSet { handlerReference = handler.map { Unmanaged.passUnretained($0) } }
    }
    /// `handler`, unretained, for a read burst to borrow: it is dropped only by the work
    /// ``close()`` leaves for later, never inside a burst.
    private var handlerReference: Unmanaged<RequestHandler>?
    /// Runs once, after the handler was told the connection closed.
    private let onClose: () -> Void

    /// The events watched on the socket.
    private(set) var interest: UInt32 = EPOLLIN.rawValue
    /// Reading is wanted (not held by the handler, and the input has not ended).
    private var readingWanted = true
    private var inputEnded = false
    private var closed = false
    /// Reply bytes the socket has not taken yet.
    private var unsent: ByteBuffer?
    private var writable = true
    private var whenWrittenBodies: [() -> Void] = []
    /// What waits for the socket to take more output (``whenSocketWritable(_:)``).
    private var writableWaiters: [() -> Void] = []
    /// Why the connection failed, told to the handler when it is closed.
    private var failure: SocketError?

    init(socket: Int32, loop: SocketLoop, handler: RequestHandler, onClose: @escaping () -> Void) {
        self.socket = socket
        self.loopReference = Unmanaged.passUnretained(loop)
        self.handler = handler
        self.handlerReference = Unmanaged.passUnretained(handler)
        self.onClose = onClose
        handler.transport = self
    }

    /// Registers with the loop and tells the handler the connection is open.
    func open() {
        loop.add(self)
        handler?.activate()
    }

    /// Graceful shutdown: the handler finishes the replies it owes, then closes.
    func quiesce() { handler?.quiesce() }

    // MARK: Events

    /// What epoll reported for the socket.
    func handle(events: UInt32) {
        let hungUp = events & (EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0
        if events & EPOLLOUT.rawValue != 0 || hungUp, unsent != nil { writeUnsent() }
        guard !closed else { return }
        if events & EPOLLOUT.rawValue != 0 || hungUp, unsent == nil, !writableWaiters.isEmpty {
            let waiters = writableWaiters
            writableWaiters = []
            updateInterest()
            loop.runSoon { for body in waiters { body() } }
        }
        if events & EPOLLIN.rawValue != 0 || hungUp, readingWanted {
            readBurst()
        } else if hungUp {
            // The peer closed both ways while reading was held: nothing can reach it any more,
            // and epoll reports a hang-up for as long as the socket is open.
            fail(operation: "poll", code: ECONNRESET)
        }
    }

    private func readBurst() {
        // The loop and the handler are borrowed for the burst: no reference count changes.
        guard let handlerReference else { return }
        loopReference._withUnsafeGuaranteedRef { loop in
            handlerReference._withUnsafeGuaranteedRef { handler in readBurst(loop: loop, handler: handler) }
        }
    }

    private func readBurst(loop: SocketLoop, handler: RequestHandler) {
        handler.startTurn()
        var reads = 0
        while reads < Self.readsPerBurst, readingWanted, !closed {
            reads += 1
            // Read into the loop's one buffer, lent to the handler for the call: it answers plain
            // GETs from it where they are and copies only what it keeps.
            let result = fsl_read(socket, loop.readStorage, Self.readSize)
            if result > 0 {
                handler.received(UnsafeRawBufferPointer(start: loop.readStorage, count: result))
                if result < Self.readSize { break }
                if !handler.wantsToRead() { holdReading() }
                continue
            }
            if result < 0 {
                // Read at once: nothing has run since the read that could set it.
                let error = errno
                if error == EAGAIN || error == EINTR { break }
                fail(operation: "read", code: error)
                return
            }
            // The end of input: the lines read before it are still answered.
            inputEnded = true
            readingWanted = false
            updateInterest()
            handler.readComplete()
            handler.inputEnded()
            return
        }
        handler.readComplete()
        if !closed, readingWanted, !handler.wantsToRead() { holdReading() }
    }

    private func holdReading() {
        readingWanted = false
        updateInterest()
    }

    private func updateInterest() {
        guard !closed else { return }
        var events: UInt32 = 0
        if readingWanted { events |= EPOLLIN.rawValue }
        if unsent != nil || !writableWaiters.isEmpty { events |= EPOLLOUT.rawValue }
        guard events != interest else { return }
        interest = events
        loop.watch(self, events: events)
    }

    // MARK: ConnectionTransport

    var isWritable: Bool { writable }

    func write(_ bytes: UnsafeRawBufferPointer) {
        guard !closed, let start = bytes.baseAddress, bytes.count > 0 else { return }
        if unsent != nil {
            unsent!.writeBytes(bytes)
            writeUnsent()
            return
        }
        let sent = fsl_send(socket, start, bytes.count)
        if sent == bytes.count { return }
        if sent < 0, errno != EAGAIN, errno != EINTR {
            fail(operation: "write", code: errno)
            return
        }
        // The rest is copied: the bytes are only lent for the call.
        unsent = ByteBuffer(bytes: UnsafeRawBufferPointer(rebasing: bytes[max(0, sent)...]))
        afterOutputChange()
    }

    private func writeUnsent() {
        guard !closed, var waiting = unsent else { return }
        let sent = waiting.withUnsafeReadableBytes { fsl_send(socket, $0.baseAddress, $0.count) }
        if sent < 0, errno != EAGAIN, errno != EINTR {
            fail(operation: "write", code: errno)
            return
        }
        waiting.moveReaderIndex(forwardBy: max(0, sent))
        unsent = waiting.readableBytes > 0 ? waiting : nil
        afterOutputChange()
    }

    /// Watches for output while bytes wait, tells the handler when the output crosses a mark,
    /// and runs what waited for everything to be written. What it tells the handler it tells in
    /// a later turn (`runSoon`), never during a ``write(_:)``: the handler lends its own output
    /// to the write (``ConnectionTransport/write(_:)``).
    private func afterOutputChange() {
        updateInterest()
        let waiting = unsent?.readableBytes ?? 0
        if writable, waiting >= Self.highWaterMark {
            writable = false
            loop.runSoon { [self] in handler?.writabilityChanged() }
        } else if !writable, waiting < Self.lowWaterMark {
            writable = true
            loop.runSoon { [self] in handler?.writabilityChanged() }
        }
        if unsent == nil, !whenWrittenBodies.isEmpty { runWhenWritten() }
    }

    private func runWhenWritten() {
        let bodies = whenWrittenBodies
        whenWrittenBodies = []
        loop.runSoon { for body in bodies { body() } }
    }

    func read() {
        guard !closed, !inputEnded, !readingWanted else { return }
        readingWanted = true
        updateInterest()
    }

    /// A write, read or the peer failed: the connection closes at once, and the handler is told
    /// why when it is told of the close.
    private func fail(operation: String, code: Int32) {
        if failure == nil { failure = SocketError(operation: operation, code: code) }
        close()
    }

    /// Closes the socket now; the handler hears of it once the current work is done (it may be
    /// in the middle of writing), before anything that waited for the output runs, so that finds
    /// the connection closed.
    func close() {
        guard !closed else { return }
        closed = true
        unsent = nil
        loop.remove(self)
        Glibc.close(socket)
        let bodies = whenWrittenBodies + writableWaiters
        whenWrittenBodies = []
        writableWaiters = []
        loop.runSoon { [self] in
            if let failure { handler?.failed(failure) }
            handler?.inactive()
            for body in bodies { body() }
            handler = nil
            onClose()
        }
    }

    func closeOutput() {
        guard !closed else { return }
        if shutdown(socket, Int32(SHUT_WR)) != 0 { close() }
    }

    func whenWritten(_ body: @escaping () -> Void) {
        whenWrittenBodies.append(body)
        if unsent == nil || closed { runWhenWritten() }
    }

    func schedule(in delay: TimeAmount, _ body: @escaping () -> Void) -> any TransportTimer {
        loop.schedule(in: delay, body)
    }

    func deliver(
        _ wait: @escaping @Sendable () async -> TokenEngine.Outcome,
        to body: @escaping (TokenEngine.Outcome) -> Void
    ) -> Task<Void, Never> {
        let loop = self.loop
        let body = UnsafeTransfer(body)
        return Task {
            let outcome = await wait()
            loop.execute { body.value(outcome) }
        }
    }

    var socketDescriptor: Int32? { closed ? nil : socket }

    func whenSocketWritable(_ body: @escaping () -> Void) {
        guard !closed else {
            loop.runSoon(body)
            return
        }
        writableWaiters.append(body)
        updateInterest()
    }

    func continueLater(_ body: @escaping () -> Void) { loop.continueLater(body) }
}

/// A socket call that failed, with its errno.
struct SocketError: Error, CustomStringConvertible {
    var operation: String
    var code: Int32

    var description: String { "\(operation): \(String(cString: strerror(code)))" }
}

/// A value handed to another thread that only ever uses it there (the loop's own closures, sent
/// through its inbox).
struct UnsafeTransfer<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
