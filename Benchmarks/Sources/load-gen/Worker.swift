import CEpoll

#if canImport(Glibc)
    import Glibc
#endif

/// One thread and the connections it drives: a blocking read loop when it has one connection
/// (two system calls a round trip), epoll over non-blocking sockets when it has several.
final class Worker {
    private let connections: [Connection]
    private let depth: Int
    private let stopAt: UInt64
    private(set) var tally: Tally
    private let bufferSize = 256 * 1024
    private let buffer: UnsafeMutablePointer<UInt8>

    init(connections: [Connection], depth: Int, windowStart: UInt64, windowEnd: UInt64) {
        self.connections = connections
        self.depth = depth
        stopAt = windowEnd
        tally = Tally(windowStart: windowStart, windowEnd: windowEnd)
        buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: bufferSize)
    }

    deinit { buffer.deallocate() }

    func run() {
        if connections.count == 1 {
            runBlocking(connections[0])
        } else {
            runEpoll()
        }
    }

    /// Reads what `connection` has, then queues and writes as many requests as replies came back.
    /// Returns false when the connection is done with (closed, failed, or finished its warm list).
    private func service(_ connection: Connection) -> Bool {
        let count = read(connection.fd, buffer, bufferSize)
        if count == 0 {
            broken(connection, "closed by the server")
            return false
        }
        if count < 0 {
            if errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK { return true }
            broken(connection, String(cString: strerror(errno)))
            return false
        }
        let now = monotonicNanoseconds()
        let completed = connection.consume(buffer, count, now: now, tally: &tally)
        tally.lastReplyAt = now
        if completed > 0 && connection.toIssue > 0 {
            connection.queue(completed, now: monotonicNanoseconds())
        }
        return !connection.isFinished
    }

    private func broken(_ connection: Connection, _ why: String) {
        if connection.isFinished { return }
        tally.brokenConnections += 1
        printError("load-gen: connection \(connection.fd): \(why)\n")
    }

    private func runBlocking(_ connection: Connection) {
        // Wake now and then to look at the clock even when the server says nothing.
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        connection.queue(depth, now: monotonicNanoseconds())
        while !connection.isFinished {
            if connection.flush() == .failed {
                broken(connection, "write: \(String(cString: strerror(errno)))")
                return
            }
            if !service(connection) { return }
            if monotonicNanoseconds() >= stopAt { return }
        }
    }

    private func runEpoll() {
        let epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard epoll >= 0 else { fatalError("epoll_create1: \(String(cString: strerror(errno)))") }
        defer { close(epoll) }
        let readable = EPOLLIN.rawValue
        let writable = EPOLLIN.rawValue | EPOLLOUT.rawValue
        var live = 0
        for (index, connection) in connections.enumerated() where !connection.isFinished {
            let flags = fcntl(connection.fd, F_GETFL)
            _ = fcntl(connection.fd, F_SETFL, flags | O_NONBLOCK)
            var event = epoll_event(events: readable, data: epoll_data_t(u32: UInt32(index)))
            epoll_ctl(epoll, EPOLL_CTL_ADD, connection.fd, &event)
            connection.queue(depth, now: monotonicNanoseconds())
            if write(connection, epoll: epoll, index: index, readable: readable, writable: writable) {
                live += 1
            } else {
                epoll_ctl(epoll, EPOLL_CTL_DEL, connection.fd, nil)
            }
        }
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while live > 0 {
            let ready = epoll_wait(epoll, events, Int32(capacity), 50)
            if ready < 0 {
                if errno == EINTR { continue }
                fatalError("epoll_wait: \(String(cString: strerror(errno)))")
            }
            for slot in 0..<Int(ready) {
                let index = Int(events[slot].data.u32)
                let connection = connections[index]
                var keep = true
                if events[slot].events & (EPOLLIN.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 {
                    keep = service(connection)
                }
                if keep {
                    keep = write(connection, epoll: epoll, index: index, readable: readable, writable: writable)
                }
                if !keep {
                    epoll_ctl(epoll, EPOLL_CTL_DEL, connection.fd, nil)
                    live -= 1
                }
            }
            if monotonicNanoseconds() >= stopAt { return }
        }
    }

    /// Flushes `connection`, asking epoll for writability only while a write is blocked.
    private func write(_ connection: Connection, epoll: Int32, index: Int, readable: UInt32, writable: UInt32) -> Bool {
        switch connection.flush() {
        case .done:
            if connection.awaitsWritable {
                connection.awaitsWritable = false
                var event = epoll_event(events: readable, data: epoll_data_t(u32: UInt32(index)))
                epoll_ctl(epoll, EPOLL_CTL_MOD, connection.fd, &event)
            }
            return true
        case .blocked:
            if !connection.awaitsWritable {
                connection.awaitsWritable = true
                var event = epoll_event(events: writable, data: epoll_data_t(u32: UInt32(index)))
                epoll_ctl(epoll, EPOLL_CTL_MOD, connection.fd, &event)
            }
            return true
        case .failed:
            broken(connection, "write: \(String(cString: strerror(errno)))")
            return false
        }
    }
}
