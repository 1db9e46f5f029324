import Foundation
import TestSupport
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A test-owned `NOTIFY_SOCKET`: a Unix datagram socket that receives sd_notify messages and any
/// file descriptors passed with them (`FDSTORE=1`).
///
/// A thread of its own reads every datagram as it comes, as systemd does, into a queue the test
/// takes from: the kernel queues only a few datagrams (`net.unix.max_dgram_qlen`, 10), and an agent
/// whose notification finds the queue full blocks in `sd_notify` (its watchdog pings alone fill it
/// in 3 s), so a test that waited on something else for a while would stall the agent.
final class NotifyListener: @unchecked Sendable {
    struct Message: Sendable {
        var fields: [String: String]
        var descriptors: [Int32]
        var text: String
    }

    /// What the reading thread has received and not yet been taken, and whether it should stop.
    private final class Inbox: @unchecked Sendable {
        let condition = NSCondition()
        var messages: [Message] = []
        var stopped = false
    }

    let path: String
    private let inbox = Inbox()

    init(directory: URL) throws {
        path = directory.appendingPathComponent("notify.sock").path
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        let bound = UnixSocketAddress.with(path: path) { bind(fd, $0, $1) } ?? -1
        guard bound == 0 else {
            close(fd)
            throw AgentError("bind \(path): \(String(cString: strerror(errno)))")
        }
        let inbox = inbox
        Thread.detachNewThread {
            defer { close(fd) }
            while true {
                inbox.condition.lock()
                let stopped = inbox.stopped
                inbox.condition.unlock()
                if stopped { return }
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 100) == 1, let message = Self.receive(fd) else { continue }
                inbox.condition.lock()
                inbox.messages.append(message)
                inbox.condition.broadcast()
                inbox.condition.unlock()
            }
        }
    }

    deinit {
        inbox.condition.lock()
        inbox.stopped = true
        inbox.condition.unlock()
    }

    /// The next message, waiting at most `timeout` seconds.
    func next(timeout: Double) async throws -> Message? {
        try await offPool { self.nextNow(timeout: timeout) }
    }

    private func nextNow(timeout: Double) -> Message? {
        let deadline = Date().addingTimeInterval(max(0, timeout))
        inbox.condition.lock()
        defer { inbox.condition.unlock() }
        while inbox.messages.isEmpty {
            guard inbox.condition.wait(until: deadline) else { return nil }
        }
        return inbox.messages.removeFirst()
    }

    /// One datagram from `fd`, which has one waiting, with the descriptors passed with it.
    private static func receive(_ fd: Int32) -> Message? {
        var data = [UInt8](repeating: 0, count: 8192)
        var control = [UInt8](repeating: 0, count: 512)
        let (count, controlLength): (Int, Int) = data.withUnsafeMutableBytes { dataBytes in
            control.withUnsafeMutableBytes { controlBytes in
                var vector = iovec(iov_base: dataBytes.baseAddress, iov_len: dataBytes.count)
                return withUnsafeMutablePointer(to: &vector) { vectorPointer in
                    var header = msghdr()
                    header.msg_iov = vectorPointer
                    header.msg_iovlen = 1
                    header.msg_control = controlBytes.baseAddress
                    header.msg_controllen = controlBytes.count
                    let received = recvmsg(fd, &header, Int32(MSG_CMSG_CLOEXEC))
                    return (received, Int(header.msg_controllen))
                }
            }
        }
        guard count >= 0 else { return nil }
        let text = String(decoding: data[0..<count], as: UTF8.self)
        var fields: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        // struct cmsghdr { size_t len; int level; int type; } then the data, on 64-bit Linux.
        var descriptors: [Int32] = []
        var offset = 0
        while offset + 16 <= controlLength {
            let length = control[offset..<offset + 8].withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            let level = control[offset + 8..<offset + 12].withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
            let type = control[offset + 12..<offset + 16].withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
            guard length >= 16 else { break }
            if level == SOL_SOCKET, type == 1 /* SCM_RIGHTS */ {
                var position = offset + 16
                while position + 4 <= offset + Int(length) {
                    descriptors.append(
                        control[position..<position + 4].withUnsafeBytes { $0.loadUnaligned(as: Int32.self) }
                    )
                    position += 4
                }
            }
            offset += (Int(length) + 7) & ~7
        }
        return Message(fields: fields, descriptors: descriptors, text: text)
    }

    /// Messages until one satisfies `condition` (returned with the ones before it), or `nil`.
    func waitFor(timeout: Double, _ condition: @escaping @Sendable (Message) -> Bool) async throws -> Message? {
        try await offPool { self.waitForNow(timeout: timeout, condition)?.match }
    }

    private func waitForNow(timeout: Double, _ condition: (Message) -> Bool) -> (match: Message, seen: [Message])? {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [Message] = []
        while Date() < deadline {
            guard let message = nextNow(timeout: deadline.timeIntervalSinceNow) else { return nil }
            if condition(message) { return (message, seen) }
            seen.append(message)
        }
        return nil
    }
}
