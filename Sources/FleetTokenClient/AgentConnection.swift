import Dispatch
import Foundation
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The connection broke or could not be made; the request may be retried on a new one.
struct ConnectionLost: Error, CustomStringConvertible {
    var description: String
}

/// The call's time-out passed before its reply came.
struct ReplyTimedOut: Error {}

/// One persistent, pipelined connection to the agent.
///
/// Requests are written in the order they are sent and replies are matched to them in order.
/// All state is confined to one serial dispatch queue; reading and writing are driven by dispatch
/// sources on a non-blocking socket, so no thread waits per request and a reply-heavy agent never
/// blocks a writer (or the other way round).
final class AgentConnection: @unchecked Sendable {
    private struct Waiter {
        var id: UInt64
        var continuation: CheckedContinuation<WireReply, any Error>?
    }

    private let fd: Int32
    private let queue: DispatchQueue
    private let readSource: DispatchSourceRead
    private let writeSource: DispatchSourceWrite
    private var writeSourceResumed = false
    private var outbound: [UInt8] = []
    private var outboundSent = 0
    private var inbound: [UInt8] = []
    private var waiters: [Waiter] = []
    private var waitersHead = 0
    private var nextID: UInt64 = 0
    private var closed = false
    private var retired = false
    private let openFlag = OpenFlag()

    /// Whether the connection can still take requests.
    var isOpen: Bool { openFlag.value }

    /// Connects to the agent's socket at `path`.
    init(path: String) throws {
        let fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else {
            throw ConnectionLost(description: "connect \(path): \(String(cString: strerror(-fd)))")
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        #if canImport(Darwin)
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
        #endif
        self.fd = fd
        self.queue = DispatchQueue(label: "fleet-token-client.connection")
        self.readSource = DispatchSource.makeReadSource(fileDescriptor: fd, queue: queue)
        self.writeSource = DispatchSource.makeWriteSource(fileDescriptor: fd, queue: queue)
        readSource.setEventHandler { [weak self] in self?.readAvailable() }
        writeSource.setEventHandler { [weak self] in self?.writePending() }
        // The fd is closed once both sources are cancelled.
        let group = DispatchGroup()
        group.enter()
        group.enter()
        readSource.setCancelHandler { group.leave() }
        writeSource.setCancelHandler { group.leave() }
        group.notify(queue: queue) { close(fd) }
        readSource.resume()
    }

    deinit {
        // Tear the sources down if nobody closed us. Cancel first: a cancelled source runs no
        // more event handlers, and a suspended one must be resumed before it is released.
        if !closed {
            readSource.cancel()
            writeSource.cancel()
            if !writeSourceResumed { writeSource.resume() }
        }
    }

    /// Sends one request line (LF included) and waits for its reply, at most `timeout` seconds.
    func request(_ line: String, timeout: Double) async throws -> WireReply {
        let bytes = Array(line.utf8)
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { [self] in
                guard !closed else {
                    continuation.resume(throwing: ConnectionLost(description: "connection closed"))
                    return
                }
                nextID += 1
                let id = nextID
                waiters.append(Waiter(id: id, continuation: continuation))
                outbound += bytes
                writePending()
                queue.asyncAfter(deadline: .now() + max(0, timeout)) { [self] in expire(id) }
            }
        }
    }

    /// Takes no new requests (``isOpen`` turns false) but lets those sent finish; closes once
    /// none is owed a reply. Used after a time-out, so later calls do not queue behind a reply
    /// that is late.
    func retire() {
        openFlag.clear()
        queue.async { [self] in
            retired = true
            closeIfRetiredAndIdle()
        }
    }

    /// Closes the connection; waiting callers get ``ConnectionLost``.
    func shutdown() {
        queue.async { [self] in fail(ConnectionLost(description: "connection closed by the client")) }
    }

    // MARK: On the queue

    private func writePending() {
        while outboundSent < outbound.count {
            let written = outbound[outboundSent...].withUnsafeBytes { raw in
                #if canImport(Glibc)
                    send(fd, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL))
                #else
                    Darwin.send(fd, raw.baseAddress, raw.count, 0)
                #endif
            }
            if written > 0 {
                outboundSent += written
            } else if written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                if !writeSourceResumed {
                    writeSourceResumed = true
                    writeSource.resume()
                }
                return
            } else {
                fail(ConnectionLost(description: "write: \(Self.errorText())"))
                return
            }
        }
        outbound.removeAll(keepingCapacity: true)
        outboundSent = 0
        if writeSourceResumed {
            writeSourceResumed = false
            writeSource.suspend()
        }
    }

    private func readAvailable() {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while !closed {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 {
                inbound += chunk[0..<count]
                deliverLines()
            } else if count == 0 {
                fail(ConnectionLost(description: "the agent closed the connection"))
                return
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else if errno != EINTR {
                fail(ConnectionLost(description: "read: \(Self.errorText())"))
                return
            }
        }
    }

    private func deliverLines() {
        var start = 0
        while let newline = inbound[start...].firstIndex(of: UInt8(ascii: "\n")) {
            let line = String(decoding: inbound[start..<newline], as: UTF8.self)
            start = newline + 1
            guard waitersHead < waiters.count else {
                fail(ConnectionLost(description: "a reply came with no request waiting"))
                return
            }
            let continuation = waiters[waitersHead].continuation
            waiters[waitersHead].continuation = nil
            waitersHead += 1
            guard let reply = WireReply.parse(Substring(line)) else {
                continuation?.resume(throwing: ConnectionLost(description: "unreadable reply from the agent"))
                fail(ConnectionLost(description: "unreadable reply from the agent"))
                return
            }
            continuation?.resume(returning: reply)
        }
        if start > 0 { inbound.removeFirst(start) }
        closeIfRetiredAndIdle()
        if waitersHead > 64, waitersHead * 2 > waiters.count {
            waiters.removeFirst(waitersHead)
            waitersHead = 0
        }
    }

    private func closeIfRetiredAndIdle() {
        guard retired, !closed else { return }
        if waitersHead >= waiters.count { fail(ConnectionLost(description: "connection retired")) }
    }

    private func expire(_ id: UInt64) {
        // Waiters are in id order; find this one among those still owed a reply.
        var index = waitersHead
        while index < waiters.count, waiters[index].id < id { index += 1 }
        guard index < waiters.count, waiters[index].id == id, let continuation = waiters[index].continuation else {
            return
        }
        // The reply may still come; its slot stays so later replies match, but nobody waits.
        waiters[index].continuation = nil
        continuation.resume(throwing: ReplyTimedOut())
    }

    private func fail(_ error: ConnectionLost) {
        guard !closed else { return }
        closed = true
        openFlag.clear()
        for index in waitersHead..<waiters.count {
            waiters[index].continuation?.resume(throwing: error)
            waiters[index].continuation = nil
        }
        waiters.removeAll()
        waitersHead = 0
        readSource.cancel()
        writeSource.cancel()
        if !writeSourceResumed {
            writeSourceResumed = true
            writeSource.resume()
        }
    }

    private static func errorText() -> String { String(cString: strerror(errno)) }
}

/// A flag readable from any thread.
private final class OpenFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var open = true

    var value: Bool { lock.withLock { open } }
    func clear() { lock.withLock { open = false } }
}
