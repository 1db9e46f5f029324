import Foundation
import Logging
import NIOCore
import Synchronization
import TestSupport
import Testing
import TokenAgent

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// One ``SocketLoop`` serving several socket pairs with the real request handler and one engine;
/// the test holds the peers' ends.
private final class SharedLoop: Sendable {
    let loop: SocketLoop

    /// What the loop and its connections logged, at debug level and above.
    let log = CapturedLog()
    private let engine: TokenEngine
    private let status: AgentStatus

    init(segments: SharedSegments? = nil) throws {
        loop = try SocketLoop(logger: log.logger(label: "loop", level: .debug))
        engine = TokenEngine(providers: ["vehicle": InstantProvider()], storage: segments)
        status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            access: AccessControl(rules: .open(agentUID: 4_000_000)),
            segments: segments
        )
        loop.start(name: "test loop")
    }

    /// A new connection served by the loop; its peer's end, blocking, is returned.
    func connect() throws -> Int32 {
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0, &pair) == 0 else {
            throw SocketError(operation: "socketpair", code: errno)
        }
        _ = fcntl(pair[1], F_SETFL, fcntl(pair[1], F_GETFL) & ~O_NONBLOCK)
        serve(pair[0])
        return pair[1]
    }

    /// Serves `socket` (non-blocking) on the loop, from any thread.
    func serve(_ socket: Int32) {
        loop.execute { [self] in serveNow(socket) }
    }

    /// Serves `socket` (non-blocking) on the loop from now on; called on the loop's thread.
    func serveNow(_ socket: Int32) {
        // The stall and descriptor-send deadlines are far off: a loaded run's test may take its
        // time to read what a flooder was sent.
        let handler = RequestHandler(
            // Turns alone: the uid's pace of costly replies (CostlyReplyPacingTests) left out.
            context: ConnectionContext(
                engine: engine,
                status: status,
                costlyReplies: CostlyReplyPacer(unitsPerSecond: 1_000_000_000)
            ),
            logger: log.logger(label: "connection", level: .debug),
            stallTimeout: .seconds(3600),
            descriptorSendTimeout: .seconds(3600)
        )
        SocketConnection(socket: socket, loop: loop, handler: handler) {}.open()
    }

    /// Runs `body` on the loop and returns what it returns.
    func onLoop<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            loop.execute { continuation.resume(returning: body()) }
        }
    }
}

/// Runs `body` on a thread of its own (it may block), and returns what it returns.
private func onThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: body()) }
    }
}

/// Holds a loop's thread in a job until released, so that what peers send meanwhile is all ready
/// at its next wait.
private final class LoopHold: Sendable {
    private let held = DispatchSemaphore(value: 0)
    private let released = DispatchSemaphore(value: 0)

    init(_ loop: SocketLoop) {
        loop.execute { [held, released] in
            held.signal()
            released.wait()
        }
    }

    /// Blocks until the loop's thread is held (call it off the concurrency pool).
    func waitUntilHeld() { held.wait() }

    func release() { released.signal() }
}

/// Sends all of `text` on the blocking socket `socket`.
private func send(_ text: String, on socket: Int32) {
    let bytes = Array(text.utf8)
    var sent = 0
    while sent < bytes.count {
        let count = bytes[sent...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        if count <= 0 { return }
        sent += count
    }
}

/// Reads `count` lines from the blocking socket `socket` (fewer if it ends, or once a line `until`
/// arrived, or after `hangLimit` without a byte: a hang detector. A miss's reply waits for its fetch on
/// Swift concurrency's pool, which a loaded parallel run may keep busy for many seconds).
private func readLines(_ count: Int, until last: String? = nil, from socket: Int32) -> [String] {
    var timeout = timeval(tv_sec: Int(hangLimit), tv_usec: 0)
    setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var received: [UInt8] = []
    var lines = 0
    var chunk = [UInt8](repeating: 0, count: 65536)
    while lines < count {
        let read = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
        if read <= 0 { break }
        received += chunk[..<read]
        lines += chunk[..<read].count(where: { $0 == UInt8(ascii: "\n") })
        if let last, received.count > last.utf8.count,
            received.suffix(last.utf8.count + 1).elementsEqual(Array((last + "\n").utf8))
        {
            break
        }
    }
    return String(decoding: received, as: UTF8.self).split(separator: "\n").map(String.init)
}

@Suite("The socket loop's fairness between connections")
struct SocketLoopFairnessTests {
    /// One peer pipelines thousands of cached GETs; another's STATS, sent right after, is answered
    /// within one turn of the first's: its `hits` counts the first's GETs answered before it.
    /// (Counted, not timed: the loop is held while both send, so both are ready at once.)
    @Test func aPipeliningPeerGetsOneTurnBeforeAnotherIsServed() async throws {
        let shared = try SharedLoop()
        let flooder = try shared.connect()
        let other = try shared.connect()
        defer {
            close(flooder)
            close(other)
        }
        // The token is cached first (one miss), so every GET after it is a hit.
        let warm = await onThread {
            send("GET vehicle v-1\n", on: other)
            return readLines(1, from: other)
        }
        #expect(warm.first?.hasPrefix("OK tok-v-1 ") == true)

        let gets = 3_000
        let held = LoopHold(shared.loop)  // the loop's thread waits while both peers send
        let stats = await onThread {
            held.waitUntilHeld()
            send(String(repeating: "GET vehicle v-1\n", count: gets), on: flooder)
            send("STATS\n", on: other)
            held.release()
            return readLines(1, from: other)
        }
        let hits = stats.first.flatMap { $0.hasPrefix("OK ") ? WireReplyFields.value("hits", in: $0) : nil }
        let answeredFirst = try #require(hits, "STATS answered: \(stats)")
        #expect(
            answeredFirst <= RequestHandler.workPerTurn,
            "the flooder got at most one turn before the other peer was served: \(answeredFirst) GETs answered"
        )
        // And the flooder loses nothing: every GET is answered, in order.
        let replies = await onThread { readLines(gets, from: flooder) }
        #expect(replies.count == gets)
        #expect(replies.allSatisfy { $0.hasPrefix("OK tok-v-1 ") })
        await shared.loop.stop()
    }

    /// A flooder sends `line` `count` times while the loop is held, another peer sends METRICS
    /// right after; then the loop goes on. What the other's METRICS (rendered in its own turn)
    /// counts of `verb`'s replies is what the flooder got before the other was served. Returns
    /// that count and every reply the flooder got.
    private func flood(_ line: String, count: Int, countedAs verb: String) async -> (
        answeredFirst: Int?, floodReplies: [String]
    ) {
        guard let shared = try? SharedLoop(), let flooder = try? shared.connect(), let other = try? shared.connect()
        else { return (nil, []) }
        defer {
            close(flooder)
            close(other)
        }
        let held = LoopHold(shared.loop)
        let metrics = await onThread {
            held.waitUntilHeld()
            send(String(repeating: line, count: count), on: flooder)
            send("METRICS\n", on: other)
            held.release()
            return readLines(100_000, until: "# EOF", from: other)
        }
        let counted = metrics.first { $0.hasPrefix("fleet_tokend_requests_total{verb=\"\(verb)\",code=\"ok\"}") }
        let answeredFirst =
            metrics.last == "# EOF" ? counted.flatMap { $0.split(separator: " ").last.flatMap { Int($0) } } ?? 0 : nil
        #expect(await shared.loop.answers(within: 10), "the loop answers the watchdog's probe between turns")
        let replies = await onThread { readLines(count, from: flooder) }
        await shared.loop.stop()
        return (answeredFirst, replies)
    }

    /// A peer pipelining STATS gets a turn's worth of them, each counted at its cost, before
    /// another peer's request is answered.
    @Test func aStatsFloodIsBoundedByCostNotOnlyByLines() async throws {
        let (answeredFirst, replies) = await flood("STATS\n", count: 2_000, countedAs: "STATS")
        let first = try #require(answeredFirst, "METRICS answered")
        #expect(
            first <= (RequestHandler.workPerTurn + WorkCost.stats) / (1 + WorkCost.stats),  // rounded up
            "one turn of STATS, at their cost, went out before the other's reply: \(first)"
        )
        #expect(replies.count == 2_000, "every STATS answered")
        #expect(replies.allSatisfy { $0.hasPrefix("OK entries=") })
    }

    /// A WARM line names up to 64 ids, each a cache decision: it costs its ids, so a peer
    /// pipelining full WARMs gets one of them a turn, not 64 (64 x 64 decisions).
    @Test func aWarmFloodIsBoundedByItsIDs() async throws {
        let warm = "WARM vehicle " + (0..<64).map { "w-\($0)" }.joined(separator: " ") + "\n"
        let (answeredFirst, replies) = await flood(warm, count: 200, countedAs: "WARM")
        let first = try #require(answeredFirst, "METRICS answered")
        #expect(first <= 1, "one WARM of 64 ids fills a turn: \(first) answered first")
        #expect(replies.count == 200, "every WARM answered")
        #expect(replies.allSatisfy { $0.hasPrefix("OK queued=") })
    }

    /// An event epoll reported for a connection that an earlier event of the same batch closed
    /// is dropped, not handed to the new connection that got the same descriptor number.
    @Test func anEventForAClosedConnectionDoesNotReachTheNextOnItsDescriptor() async throws {
        let shared = try SharedLoop()
        // The served end gets a number far above any other descriptor of the test process, so
        // that no other test's descriptor takes it while it is free for a moment below: near the
        // process's limit, which the whole parallel suite never comes near (it peaks at about
        // 1,200 descriptors; numbers in the 900s were taken, and one was, here, while free).
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0, &pair) == 0)
        let floor = try highDescriptorFloor()
        let number = fcntl(pair[0], F_DUPFD_CLOEXEC, floor + Int32.random(in: 0..<64))
        try #require(number >= floor, "a descriptor at or above \(floor)")
        close(pair[0])
        let first = pair[1]
        _ = fcntl(first, F_SETFL, fcntl(first, F_GETFL) & ~O_NONBLOCK)
        shared.serve(number)
        #expect(
            await onThread { () -> [String] in
                send("PING\n", on: first)
                return readLines(1, from: first)
            } == ["PONG"]
        )

        let held = LoopHold(shared.loop)
        await onThread { held.waitUntilHeld() }
        // Queued while the loop waits, so the wake-up comes before the peer's bytes in the next
        // batch: the job closes the connection and serves a new one on the same number.
        let second = Mutex<Int32>(-1)
        let loop = shared.loop
        loop.execute {
            for connection in loop.openConnections { connection.close() }
            var pair: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0, &pair) == 0,
                dup2(pair[0], number) == number
            else { return }
            close(pair[0])
            second.withLock { $0 = pair[1] }
            shared.serveNow(number)
        }
        await onThread {
            send("PING\n", on: first)
            held.release()
        }
        let sockets = await shared.onLoop { loop.openConnections.map(\.socket) }
        #expect(sockets == [number], "the new connection has the closed one's descriptor number")
        let dropped = shared.log.lines.withLock { lines in
            lines.filter { $0.hasPrefix("debug dropped an event for a closed connection") }
        }
        #expect(dropped == ["debug dropped an event for a closed connection descriptor=\(number)"])
        let peer = second.withLock { $0 }
        try #require(peer >= 0, "the job made the new connection's pair and moved it to \(number)")
        _ = fcntl(peer, F_SETFL, fcntl(peer, F_GETFL) & ~O_NONBLOCK)
        #expect(
            await onThread { () -> [String] in
                send("PING\n", on: peer)
                return readLines(1, from: peer)
            } == ["PONG"],
            "the new connection is served"
        )
        close(peer)
        close(first)
        await loop.stop()
    }

    /// A client that asks for a segment's descriptor but reads nothing: the send waits for its
    /// socket to turn writable (one `sendmsg`, not one every few milliseconds), and goes out once
    /// the client reads.
    @Test func aDescriptorSendWaitsForWritabilityNotATimer() async throws {
        let segments = SharedSegments(kinds: ["vehicle"], policy: RefreshPolicy(), logger: Logger(label: "test"))
        defer { segments.retireAll() }
        let shared = try SharedLoop(segments: segments)
        var pair: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue | SOCK_NONBLOCK.rawValue), 0, &pair) == 0)
        // The served end's output is full before the loop serves it: the client has not read.
        var filled = 0
        let junk = [UInt8](repeating: 0x2E, count: 4096)
        while true {
            let sent = junk.withUnsafeBytes { Glibc.send(pair[0], $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { break }
            filled += sent
        }
        let peer = pair[1]
        let junkBytes = filled
        _ = fcntl(peer, F_SETFL, fcntl(peer, F_GETFL) & ~O_NONBLOCK)
        defer { close(peer) }
        shared.serve(pair[0])
        await onThread { send("SHM vehicle\n", on: peer) }

        let loop = shared.loop
        // Each time a send finds the socket full, the connection says so once in its log.
        @Sendable func attempts() async -> Int {
            await shared.onLoop {
                shared.log.lines.withLock { lines in
                    lines.filter { $0.hasPrefix("debug a segment descriptor waits") }.count
                }
            }
        }
        let deadline = ContinuousClock.now + hangLimitDuration
        while await attempts() < 1, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(await attempts() == 1, "the first send found the socket full")
        try await Task.sleep(for: .milliseconds(300))
        #expect(await attempts() == 1, "and nothing polled while the client read nothing")

        let line = await onThread { () -> String in
            var skipped = 0
            var buffer = [UInt8](repeating: 0, count: 65536)
            while skipped < junkBytes {
                let count = buffer.withUnsafeMutableBytes {
                    recv(peer, $0.baseAddress, min($0.count, junkBytes - skipped), 0)
                }
                if count <= 0 { return "" }
                skipped += count
            }
            return readLines(1, from: peer).first ?? ""
        }
        #expect(line.hasPrefix("OK size="), "the descriptor's line came once the client read: \(line)")
        #expect(await attempts() == 1, "the send after the wait went out")
        await loop.stop()
    }

    /// A loop whose `epoll_wait` fails ends: it no longer answers the watchdog's probe, and says
    /// why it ended.
    @Test func aLoopThatEndsOnItsOwnSaysSoAndFailsTheProbe() async throws {
        let loop = try SocketLoop(logger: Logger(label: "test"))
        loop.start(name: "test loop")
        #expect(await loop.answers(within: hangLimit))
        // The loop's epoll descriptor now names /dev/null: its next wait fails with EINVAL.
        let null = open("/dev/null", O_RDONLY)
        #expect(dup2(null, loop.epoll) == loop.epoll)
        close(null)
        loop.execute {}  // wakes the loop (its current wait holds the old epoll)
        let failure = await loop.ended()
        #expect(failure?.contains("epoll_wait failed") == true, "\(failure ?? "nil")")
        #expect(await loop.answers(within: 1) == false, "an ended loop fails the probe")
    }

    /// The socket server's service fails when its loop ends, so the agent exits and is restarted.
    @Test func theServerFailsWhenItsLoopEnds() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("loop-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let listening = Mutex(false)
        let server = TokenSocketServer(
            configuration: SocketServerConfiguration(path: directory.appendingPathComponent("s.sock").path),
            engine: engine,
            status: AgentStatus(engine: engine, server: ServerStatistics()),
            logger: Logger(label: "test"),
            onListening: { listening.withLock { $0 = true } }
        )
        let run = Task { try await server.run() }
        let deadline = ContinuousClock.now + hangLimitDuration
        while !listening.withLock({ $0 }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let loop = try #require(server.runningLoop.withLock { $0 })
        #expect(await loop.answers(within: hangLimit), "the listener is watched before the loop is broken")
        let null = open("/dev/null", O_RDONLY)
        #expect(dup2(null, loop.epoll) == loop.epoll)
        close(null)
        loop.execute {}
        await #expect(throws: SocketPath.Problem.self) { try await run.value }
        #expect(await server.socketLoopAnswers(within: 1) == false, "the watchdog stops pinging")
    }
}

/// Reads a `name=value` field of a STATS reply line.
private enum WireReplyFields {
    static func value(_ name: String, in line: String) -> Int? {
        for field in line.split(separator: " ") where field.hasPrefix("\(name)=") {
            return Int(field.dropFirst(name.count + 1))
        }
        return nil
    }
}

/// The lowest of 64 descriptor numbers just under the process's limit on open files (at most
/// 65,536, so that the descriptor table stays small), where no other test's descriptor lands.
private func highDescriptorFloor() throws -> Int32 {
    var limit = rlimit()
    try #require(getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0)
    let top = min(limit.rlim_cur, 65_536)
    try #require(top >= 2_048, "the limit on open files (\(limit.rlim_cur)) leaves room above the suite's own")
    return Int32(top) - 64
}
