import Foundation
import Synchronization
import TestSupport
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Whatever may answer on the agent's socket: a fake agent on a Unix socket in a temporary
/// directory that answers each request line as a test says, however hostile. Blocking code on
/// threads of its own (one accepts, one per connection), never on Swift concurrency's pool.
final class HostileAgent: Sendable {
    /// What to send for one request line.
    enum Answer: Sendable {
        /// `bytes`, with `descriptors` attached to the first byte (`SCM_RIGHTS`).
        case reply([UInt8], descriptors: [Int32] = [])
        /// `chunk` again and again, as fast as the peer reads, until it stops reading or the agent
        /// is stopped.
        case endless([UInt8])
        /// `chunk` every `interval` seconds until the peer stops reading or the agent is stopped.
        case trickle([UInt8], interval: Double)

        /// `text` as the reply's bytes.
        static func line(_ text: String, descriptors: [Int32] = []) -> Answer {
            .reply(Array((text + "\n").utf8), descriptors: descriptors)
        }
    }

    private struct State {
        var connections: [Int32] = []
        var stopped = false
    }

    let socketPath: String
    private let directory: URL
    private let listener: Int32
    private let answer: @Sendable (String) -> Answer
    private let state = Mutex(State())
    private let written = Atomic(0)
    private let requestCount = Atomic(0)
    private let connectionCount = Atomic(0)

    /// Bytes written to every connection so far.
    var bytesWritten: Int { written.load(ordering: .relaxed) }
    /// Request lines read so far.
    var requests: Int { requestCount.load(ordering: .relaxed) }
    /// Connections accepted so far.
    var connectionsAccepted: Int { connectionCount.load(ordering: .relaxed) }

    /// Listens on a new socket and answers every request line with `answer(line)`.
    init(answer: @escaping @Sendable (String) -> Answer) throws {
        directory = try AgentProcess.makeTemporaryDirectory()
        socketPath = directory.appendingPathComponent("hostile.sock").path
        self.answer = answer
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw AgentError("socket: \(String(cString: strerror(errno)))") }
        let bound = UnixSocketAddress.with(path: socketPath) { bind(fd, $0, $1) == 0 } ?? false
        guard bound, listen(fd, 16) == 0 else {
            close(fd)
            throw AgentError("bind or listen \(socketPath): \(String(cString: strerror(errno)))")
        }
        listener = fd
        Thread.detachNewThread { [self] in acceptConnections() }
    }

    /// Stops accepting, ends every connection and removes the socket's directory.
    func stop() {
        let connections = state.withLock { state -> [Int32] in
            guard !state.stopped else { return [] }
            state.stopped = true
            return state.connections
        }
        // Shutting down wakes the threads blocked in accept, read or send; each closes its own.
        _ = shutdown(listener, Int32(SHUT_RDWR))
        for connection in connections { _ = shutdown(connection, Int32(SHUT_RDWR)) }
        try? FileManager.default.removeItem(at: directory)
    }

    private var isStopped: Bool { state.withLock { $0.stopped } }

    private func acceptConnections() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR, !isStopped { continue }
                break
            }
            let accepted = state.withLock { state -> Bool in
                guard !state.stopped else { return false }
                state.connections.append(connection)
                return true
            }
            _ = fcntl(connection, F_SETFD, FD_CLOEXEC)
            guard accepted else {
                close(connection)
                break
            }
            connectionCount.add(1, ordering: .relaxed)
            Thread.detachNewThread { [self] in serve(connection) }
        }
        close(listener)
    }

    /// Reads request lines and answers each, until the peer or the agent ends the connection.
    private func serve(_ connection: Int32) {
        defer {
            state.withLock { $0.connections.removeAll { $0 == connection } }
            close(connection)
        }
        var pending: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !isStopped {
            let count = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            pending += chunk[..<count]
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                requestCount.add(1, ordering: .relaxed)
                guard perform(answer(line), on: connection) else { return }
            }
        }
    }

    /// Sends `answer`; `false` once the connection is over.
    private func perform(_ answer: Answer, on connection: Int32) -> Bool {
        switch answer {
        case .reply(let bytes, let descriptors):
            return send(bytes, descriptors: descriptors, on: connection)
        case .endless(let chunk):
            while !isStopped { guard send(chunk, descriptors: [], on: connection) else { return false } }
            return false
        case .trickle(let chunk, let interval):
            while !isStopped {
                guard send(chunk, descriptors: [], on: connection) else { return false }
                Thread.sleep(forTimeInterval: interval)
            }
            return false
        }
    }

    /// Writes `bytes` whole (blocking), `descriptors` riding with the first byte.
    private func send(_ bytes: [UInt8], descriptors: [Int32], on connection: Int32) -> Bool {
        var offset = 0
        var attached = descriptors
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { raw in
                sendWithDescriptors(
                    connection,
                    UnsafeRawBufferPointer(rebasing: raw[offset...]),
                    attached
                )
            }
            if sent < 0, errno == EINTR { continue }
            guard sent > 0 else { return false }
            written.add(sent, ordering: .relaxed)
            offset += sent
            attached = []
        }
        return true
    }
}

/// `sendmsg` of `bytes` with `descriptors` as one `SCM_RIGHTS` message (none: a plain send), no
/// SIGPIPE. The bytes sent, or -1 with errno set.
func sendWithDescriptors(_ socket: Int32, _ bytes: UnsafeRawBufferPointer, _ descriptors: [Int32]) -> Int {
    var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
    // CMSG_SPACE and CMSG_LEN by hand: a header, then the descriptors, padded to a word.
    let headerSize = MemoryLayout<cmsghdr>.size
    let dataSize = descriptors.count * MemoryLayout<Int32>.size
    var control = [UInt8](repeating: 0, count: descriptors.isEmpty ? 0 : headerSize + (dataSize + 7) / 8 * 8)
    return control.withUnsafeMutableBytes { raw -> Int in
        if !descriptors.isEmpty {
            var header = cmsghdr()
            header.cmsg_len = headerSize + dataSize
            header.cmsg_level = SOL_SOCKET
            header.cmsg_type = Int32(SCM_RIGHTS)
            raw.storeBytes(of: header, as: cmsghdr.self)
            for (index, descriptor) in descriptors.enumerated() {
                raw.storeBytes(of: descriptor, toByteOffset: headerSize + index * 4, as: Int32.self)
            }
        }
        return withUnsafeMutablePointer(to: &vector) { vectorPointer in
            var message = msghdr()
            message.msg_iov = vectorPointer
            message.msg_iovlen = 1
            message.msg_control = descriptors.isEmpty ? nil : raw.baseAddress
            message.msg_controllen = raw.count
            return sendmsg(socket, &message, Int32(MSG_NOSIGNAL))
        }
    }
}

/// How many of this process's descriptors are open on a file whose link in `/proc/self/fd`
/// contains `name` (a memory file shows as `/memfd:<name> (deleted)`).
func openDescriptors(naming name: String) -> Int {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return entries.count { entry in
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"))?.contains(name) == true
    }
}

/// The result of a command run with a time bound.
struct BoundedRun: Sendable {
    var status: Int32
    var stdout: [UInt8]
    var stderr: String
    /// Seconds from start to exit.
    var elapsed: Double
    /// Whether it was still running at the bound and was killed.
    var killed: Bool

    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
}

/// Runs `executable` with `arguments`, killing it (SIGKILL) if it still runs after `killAfter`
/// seconds. Blocking work on a thread of its own.
func runBounded(_ executable: String, _ arguments: [String], killAfter: Double) async throws -> BoundedRun {
    try await offPool {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        let started = Date()
        try process.run()
        let pid = process.processIdentifier
        let killer = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + killAfter, execute: killer)
        // What these commands write to standard error is a line or two: it never fills the pipe.
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        killer.cancel()
        return BoundedRun(
            status: process.terminationStatus,
            stdout: Array(output),
            stderr: String(decoding: errors, as: UTF8.self),
            elapsed: Date().timeIntervalSince(started),
            killed: process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL
        )
    }
}
