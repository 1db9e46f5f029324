import CSocketLoop
import Foundation
import Logging
import NIOCore
import Synchronization
import TestSupport
import TokenAgent

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// One client connection served the way the agent serves its socket: a ``SocketLoop`` of its own
/// serves one end of a socket pair through the real ``SocketConnection`` and ``RequestHandler``,
/// with the real engine; the test is the client at the other end. Its reads and writes block, each
/// on a thread of its own (``offPool``), never on a pool thread; what the agent's side is in
/// (reading held, output over its mark) is read on the loop's own thread.
final class ServedConnection: Sendable {
    let loop: SocketLoop
    let status: AgentStatus
    /// The test's end (blocking).
    let client: Int32
    /// The served end's descriptor number; the loop owns it.
    private let served: Int32
    /// The connection; used on the loop's thread only.
    private let connection: UnsafeTransfer<SocketConnection>
    /// Bytes read from `client` past the last line taken.
    private let unreadBytes = Bytes()
    private let closedFlag = Flag()

    private final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    private final class Bytes: Sendable {
        let value = Mutex<[UInt8]>([])
    }

    /// `type`: the socket pair's type; `SOCK_SEQPACKET` keeps each `send` the agent makes one
    /// record, so a test can count them. `sendBuffer`: the served end's `SO_SNDBUF`, for a test
    /// whose replies must back up in the agent. `costlyReplies`: the pace of its uid's costly
    /// replies, which connections may share. `stallTimeout` is an hour: these tests run in real
    /// time beside the whole suite, and a client a starved test has not read from yet is no
    /// stalled client (stalls are tested in scripted time, `RequestHandlerBehaviourTests`).
    init(
        rules: AccessRules = .open(agentUID: 4_000_000),
        peer: PeerCredentials? = PeerCredentials(pid: 1, uid: 1000, gid: 1000),
        admission: ServerStatistics.Admission = .admitted,
        requestTimeout: TimeAmount = .seconds(10),
        stallTimeout: TimeAmount = .seconds(3600),
        health: AgentHealth = AgentHealth(),
        storage: (any TokenStorage)? = nil,
        type: Int32 = Int32(SOCK_STREAM.rawValue),
        sendBuffer: Int32? = nil,
        costlyReplies: CostlyReplyPacer = CostlyReplyPacer()
    ) throws {
        // Cached tokens answer at once, on the loop's thread; only `hang-` ids fetch.
        let (engine, status) = handlerTestEngine(rules: rules, health: health, storage: storage)
        self.status = status
        var pair: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, type | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
            throw SocketError(operation: "socketpair", code: errno)
        }
        if var size = sendBuffer {
            setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        }
        // The agent's accepted sockets are non-blocking; the test's end blocks, with a hang
        // detector on its reads.
        _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(pair[1], SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        served = pair[0]
        client = pair[1]
        loop = try SocketLoop(logger: Logger(label: "test"))
        let handler = RequestHandler(
            context: ConnectionContext(engine: engine, status: status, costlyReplies: costlyReplies),
            logger: Logger(label: "test"),
            admission: admission,
            peer: peer,
            requestTimeout: requestTimeout,
            stallTimeout: stallTimeout
        )
        let closedFlag = self.closedFlag
        connection = UnsafeTransfer(
            SocketConnection(socket: pair[0], loop: loop, handler: handler) {
                closedFlag.value.store(true, ordering: .releasing)
            }
        )
        loop.start(name: "test loop")
        let connection = self.connection
        loop.execute { connection.value.open() }
    }

    /// Whether the agent has closed its side (and told the handler).
    var closed: Bool { closedFlag.value.load(ordering: .acquiring) }

    /// Waits for the agent to close the connection.
    func waitUntilClosed() async -> Bool {
        await eventually { closed }
    }

    /// Writes `text`, all of it.
    func send(_ text: String) async throws {
        try await offPool { [self] in try sendNow(text) }
    }

    /// ``send(_:)``, blocking the calling thread (never a pool thread).
    func sendNow(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes {
                Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            guard count > 0 else { throw SocketError(operation: "send", code: errno) }
            sent += count
        }
    }

    /// The next `count` reply lines, waiting for them.
    func lines(_ count: Int) async throws -> [String] {
        try await readLines { lines in lines.count == count }
    }

    /// Reply lines up to and with the first that is `last`, waiting for it.
    func lines(through last: String) async throws -> [String] {
        try await readLines { lines in lines.last == last }
    }

    /// The replies to `text`: it is sent with a `PING` after it, and the lines up to that
    /// `PING`'s `PONG` are returned (each request has its reply, in order, so the `PONG` ends
    /// exactly the replies to `text`, and nothing else came before it).
    func replies(to text: String) async throws -> [String] {
        let pings = text.split(separator: "\n", omittingEmptySubsequences: false).count { $0 == "PING" }
        try await send(text + "PING\n")
        let lines = try await readLines { lines in lines.count { $0 == "PONG" } == pings + 1 }
        return Array(lines.dropLast())
    }

    /// Every line until the agent ends the connection (its side shut, or closed).
    func readToEnd() async throws -> [String] {
        try await readLines(untilEnd: true) { _ in false }
    }

    /// One record of a `SOCK_SEQPACKET` pair: what one `send` of the agent's carried.
    func record() async throws -> String {
        let client = self.client
        return try await offPool {
            var buffer = [UInt8](repeating: 0, count: 256 * 1024)
            let count = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { throw SocketError(operation: "recv", code: count == 0 ? 0 : errno) }
            return String(decoding: buffer[..<count], as: UTF8.self)
        }
    }

    /// Lines read until `done` holds for them (or, with `untilEnd`, until the end of the
    /// connection); a read that fails or ends first throws.
    private func readLines(untilEnd: Bool = false, _ done: @escaping @Sendable ([String]) -> Bool) async throws
        -> [String]
    {
        try await offPool { [self] in try readLinesNow(untilEnd: untilEnd, done) }
    }

    /// The next `count` reply lines, blocking the calling thread (never a pool thread).
    func linesNow(_ count: Int) throws -> [String] {
        try readLinesNow { lines in lines.count == count }
    }

    /// Reply lines up to and with the first that is `last`, blocking the calling thread.
    func linesNow(through last: String) throws -> [String] {
        try readLinesNow { lines in lines.last == last }
    }

    private func readLinesNow(untilEnd: Bool = false, _ done: ([String]) -> Bool) throws -> [String] {
        var bytes = unreadBytes.value.withLock { $0 }
        var lines: [String] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            while !done(lines), let end = bytes.firstIndex(of: UInt8(ascii: "\n")) {
                lines.append(String(decoding: bytes[..<end], as: UTF8.self))
                bytes.removeSubrange(...end)
            }
            if done(lines) && !untilEnd { break }
            let count = chunk.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if count > 0 {
                bytes += chunk[..<count]
                continue
            }
            // The end: shut or closed by the agent (a reset when it closed with input unread).
            if untilEnd, count == 0 || errno == ECONNRESET { break }
            throw SocketError(operation: "recv after \(lines)", code: count == 0 ? 0 : errno)
        }
        unreadBytes.value.withLock { $0 = bytes }
        return lines
    }

    /// What the agent's side of the connection is in, read on the loop's thread.
    struct State: Equatable, CustomStringConvertible {
        /// The connection watches its socket for input: reading is not held.
        var reading: Bool
        /// Its output not yet taken by the socket is under its high-water mark.
        var writable: Bool
        /// Bytes the client sent that the agent has not read yet.
        var unread: Int

        var description: String { "reading=\(reading) writable=\(writable) unread=\(unread)" }
    }

    func state() async -> State {
        await withCheckedContinuation { continuation in
            onLoopState { continuation.resume(returning: $0) }
        }
    }

    /// ``state()``, blocking the calling thread (never a pool thread).
    func stateNow() -> State {
        let done = DispatchSemaphore(value: 0)
        let result = Mutex<State?>(nil)
        onLoopState { state in
            result.withLock { $0 = state }
            done.signal()
        }
        done.wait()
        return result.withLock { $0! }
    }

    /// Waits, blocking the calling thread, up to `seconds` for `condition` to hold of the state.
    func waitNow(within seconds: Double = hangLimit, for condition: (State) -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while ContinuousClock.now < deadline {
            if condition(stateNow()) { return true }
            usleep(5000)
        }
        return condition(stateNow())
    }

    private func onLoopState(_ body: @escaping @Sendable (State) -> Void) {
        let connection = self.connection
        let served = self.served
        loop.execute {
            var unread: Int32 = 0
            _ = ioctl(served, UInt(FIONREAD), &unread)
            body(
                State(
                    reading: connection.value.interest & EPOLLIN.rawValue != 0,
                    writable: connection.value.isWritable,
                    unread: Int(unread)
                )
            )
        }
    }

    /// Bytes the agent sent that the client has not read yet.
    var repliesWaiting: Int {
        var waiting: Int32 = 0
        _ = ioctl(client, UInt(FIONREAD), &waiting)
        return Int(waiting)
    }

    /// Closes the client's end and stops the loop (which closes the agent's).
    func finish() async {
        close(client)
        await loop.stop()
    }
}
