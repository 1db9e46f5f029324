import Foundation
import Logging
import NIOCore
import Synchronization
import Testing
import TokenAgent

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// A count any thread may add to.
private final class Counter: Sendable {
    let value = Atomic(0)
}

/// What ran, in order.
private final class RunLog: Sendable {
    let entries = Mutex<[Int]>([])

    func append(_ entry: Int) { entries.withLock { $0.append(entry) } }
    var all: [Int] { entries.withLock { $0 } }
}

/// Runs `body` on a thread of its own (it may block), and returns what it returns.
private func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// A running ``SocketLoop`` serving one end of a socket pair with the real request handler and
/// engine; the test holds the other end (`peer`).
private final class LoopedConnection: Sendable {
    let loop: SocketLoop
    let peer: Int32
    private let closedFlag = Atomic<Bool>(false)

    var closed: Bool { closedFlag.load(ordering: .acquiring) }

    /// `sendBuffer`: the served end's `SO_SNDBUF`, when a test needs replies to wait unsent.
    init(stallTimeout: TimeAmount = .seconds(3600), sendBuffer: Int32? = nil) throws {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0, &pair) == 0 else {
            throw SocketError(operation: "socketpair", code: errno)
        }
        if var size = sendBuffer {
            setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        peer = pair[1]
        _ = fcntl(peer, F_SETFL, fcntl(peer, F_GETFL) & ~O_NONBLOCK)
        loop = try SocketLoop(logger: Logger(label: "test"))
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            access: AccessControl(rules: .open(agentUID: 4_000_000))
        )
        let handler = RequestHandler(
            context: ConnectionContext(engine: engine, status: status),
            logger: Logger(label: "test"),
            stallTimeout: stallTimeout
        )
        let socket = pair[0]
        let loop = self.loop
        let closedFlag = UnsafeTransfer(self)
        loop.start(name: "test loop")
        loop.execute {
            SocketConnection(socket: socket, loop: loop, handler: handler) {
                closedFlag.value.closedFlag.store(true, ordering: .releasing)
            }.open()
        }
    }

    /// Waits up to `seconds` for the agent's side to close.
    func waitUntilClosed(seconds: Double) async -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while !closed, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(20)) }
        return closed
    }

    func write(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { send(peer, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }

    /// Everything the agent sends until it closes (or 60 s pass: a hang detector).
    func readToEnd() -> String {
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(peer, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(peer, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received += chunk[..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }

    func stop() async {
        close(peer)
        await loop.stop()
    }
}

@Suite("The socket loop")
struct SocketLoopTests {
    @Test func timersRunInDeadlineOrderAndCancelledOnesNever() {
        var timers = LoopTimers()
        let ran = RunLog()
        _ = timers.start(at: 30) { ran.append(30) }
        _ = timers.start(at: 10) { ran.append(10) }
        let cancelled = timers.start(at: 20) { ran.append(20) }
        _ = timers.start(at: 10) { ran.append(11) }
        cancelled.cancel()
        #expect(timers.nextDeadline() == 10)
        for timer in timers.takeDue(now: 25) { timer.fire() }
        #expect(ran.all == [10, 11], "due ones in deadline order, then start order; the cancelled one not")
        #expect(timers.nextDeadline() == 30)
        for timer in timers.takeDue(now: 30) { timer.fire() }
        #expect(ran.all == [10, 11, 30])
        #expect(timers.nextDeadline() == nil)
    }

    @Test func aTimerCancelledByAnEarlierOneDueAtTheSameTimeDoesNotRun() {
        var timers = LoopTimers()
        let ran = RunLog()
        final class Later { var timer: LoopTimer? }
        let later = Later()
        _ = timers.start(at: 10) {
            ran.append(1)
            later.timer?.cancel()
        }
        later.timer = timers.start(at: 10) { ran.append(2) }
        for timer in timers.takeDue(now: 10) { timer.fire() }
        #expect(ran.all == [1], "the second was cancelled before its turn came")
    }

    @Test func cancelledTimersDoNotPileUp() {
        var timers = LoopTimers()
        for index in 0..<10_000 { timers.start(at: UInt64(1_000_000 + index)) {}.cancel() }
        let live = timers.start(at: 5) {}
        #expect(timers.count <= 2048, "cancelled timers are swept out: \(timers.count) in the heap")
        #expect(timers.nextDeadline() == 5)
        live.cancel()
        #expect(timers.nextDeadline() == nil)
    }

    @Test func workFromOtherThreadsRunsOnceEachOnTheLoop() async throws {
        let loop = try SocketLoop(logger: Logger(label: "test"))
        loop.start(name: "test loop")
        let count = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    await onThread {
                        for _ in 0..<2000 { loop.execute { count.value.add(1, ordering: .relaxed) } }
                    }
                }
            }
        }
        let deadline = ContinuousClock.now + .seconds(60)
        while count.value.load(ordering: .relaxed) < 8000, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(count.value.load(ordering: .relaxed) == 8000, "no job is lost or run twice")
        await loop.stop()
    }

    @Test func aLoopStuckInOneJobDoesNotAnswerTheWatchdogsProbe() async throws {
        let loop = try SocketLoop(logger: Logger(label: "test"))
        loop.start(name: "test loop")
        #expect(await loop.answers(within: 60))
        let release = DispatchSemaphore(value: 0)
        loop.execute { release.wait() }  // the loop's own thread blocks, not the test's
        #expect(await loop.answers(within: 0.3) == false, "a stuck loop fails the probe")
        release.signal()
        #expect(await loop.answers(within: 60), "and answers again once it is free")
        await loop.stop()
    }

    @Test func aHalfClosedPeerGetsEveryReplyAndThenTheEnd() async throws {
        let connection = try LoopedConnection()
        let text = await onThread {
            _ = connection.write(String(repeating: "PING\n", count: 2000))
            shutdown(connection.peer, Int32(SHUT_WR))
            return connection.readToEnd()
        }
        #expect(text == String(repeating: "PONG\n", count: 2000))
        #expect(await connection.waitUntilClosed(seconds: 60))
        await connection.stop()
    }

    @Test func aPeerThatEndsItsInputAfterQuitStillGetsEveryReplyBeforeIt() async throws {
        // A small send buffer: the replies before QUIT overflow it, yet stay under the
        // high-water mark, so QUIT is taken in the same read and the end of input read next,
        // while replies still wait to be written. They must all be written before the close.
        let connection = try LoopedConnection(sendBuffer: 4096)
        let text = await onThread {
            _ = connection.write(String(repeating: "HELP\n", count: 500) + "QUIT\n")
            shutdown(connection.peer, Int32(SHUT_WR))
            return connection.readToEnd()
        }
        let replies = text.split(separator: "\n").filter { $0.hasPrefix("OK ") }
        #expect(replies.count == 500, "every reply before QUIT, then the end (\(text.utf8.count) bytes)")
        #expect(await connection.waitUntilClosed(seconds: 60))
        await connection.stop()
    }

    @Test func aPeerThatHangsUpWhileReadingIsHeldIsClosedAtOnce() async throws {
        // The stall time-out is an hour and the fetches never end: only the hang-up can close
        // the connection in time.
        let connection = try LoopedConnection(stallTimeout: .seconds(3600))
        let wrote = await onThread {
            // More requests than a connection may owe replies for: it stops reading, with no
            // output waiting.
            connection.write((0..<200).map { "GET vehicle hang-\($0)\n" }.joined())
        }
        #expect(wrote)
        #expect(!connection.closed, "open while the peer is")
        close(connection.peer)
        #expect(await connection.waitUntilClosed(seconds: 60), "a peer gone both ways is closed, not polled forever")
        await connection.loop.stop()
    }
}
