import Histogram

#if canImport(Glibc)
    import Glibc
#endif

/// What one thread counted. Latencies are in nanoseconds.
struct Tally {
    var histogram = Histogram<UInt64>(highestTrackableValue: 60_000_000_000, numberOfSignificantValueDigits: .three)
    /// Good replies whose reply arrived inside the measured window (their latency is recorded).
    var measured = 0
    /// Replies of any kind, warm-up included.
    var replies = 0
    /// Replies that were not a token (agent) or not the expected Redis type, warm-up included.
    var errors = 0
    /// Connections the server closed or that failed.
    var brokenConnections = 0
    /// When the last reply arrived (monotonic ns).
    var lastReplyAt: UInt64 = 0
    let windowStart: UInt64
    let windowEnd: UInt64

    init(windowStart: UInt64, windowEnd: UInt64) {
        self.windowStart = windowStart
        self.windowEnd = windowEnd
    }
}

/// The monotonic clock in nanoseconds.
@inline(__always)
func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) &* 1_000_000_000 &+ UInt64(now.tv_nsec)
}

/// One client connection in a closed loop: it keeps `depth` requests outstanding, writes the ones
/// its replies free up in one `write`, and parses replies in place from the thread's read buffer.
/// Nothing here allocates after `init`.
final class Connection {
    enum Expect {
        /// The agent: a reply whose first byte is `O` (`OK <token> <expires-at>`).
        case agentToken
        /// Redis GET: a bulk string `$<len>\r\n...`; a nil bulk (`$-1`) is an error.
        case bulkString
        /// Redis SET: a simple string `+OK`.
        case simpleString
    }

    enum FlushResult {
        case done
        case blocked
        case failed
    }

    private enum ParseState {
        case start
        case length
        case body
        case line
    }

    let fd: Int32
    private let book: RequestBook
    private let depth: Int
    private let expect: Expect

    /// The first request not yet written in full, as an index into the book (always below `keys`).
    private var sendIndex: Int
    /// Requests queued from `sendIndex` on, not yet written in full.
    private var sendCount = 0
    /// Bytes of the request at `sendIndex` already written.
    private var sendOffset = 0
    /// Requests this connection may still queue (`Int.max` in a timed run).
    private(set) var toIssue: Int

    /// When each outstanding request was queued for writing, oldest first (a ring of `depth`).
    private let stamps: UnsafeMutablePointer<UInt64>
    private var head = 0
    private(set) var outstanding = 0

    private var state = ParseState.start
    private var replyIsGood = false
    private var bulkLength = 0
    private var bulkIsNil = false
    private var bodyLeft = 0

    /// Whether epoll is also watching for writability (a write was blocked).
    var awaitsWritable = false

    var isFinished: Bool { toIssue == 0 && outstanding == 0 }

    init(fd: Int32, book: RequestBook, depth: Int, expect: Expect, firstRequest: Int, requests: Int) {
        self.fd = fd
        self.book = book
        self.depth = depth
        self.expect = expect
        sendIndex = firstRequest
        toIssue = requests
        stamps = UnsafeMutablePointer<UInt64>.allocate(capacity: depth)
        stamps.initialize(repeating: 0, count: depth)
    }

    deinit {
        stamps.deallocate()
        close(fd)
    }

    /// Queues up to `count` more requests (fewer when the warm-up list runs out), stamped `now`.
    @inline(__always)
    func queue(_ count: Int, now: UInt64) {
        let count = min(count, toIssue, depth - outstanding)
        guard count > 0 else { return }
        if toIssue != Int.max { toIssue -= count }
        var slot = head + outstanding
        if slot >= depth { slot -= depth }
        for _ in 0..<count {
            stamps[slot] = now
            slot += 1
            if slot == depth { slot = 0 }
        }
        outstanding += count
        sendCount += count
    }

    /// Writes every queued request it can, in one `write` when the socket takes it all.
    func flush() -> FlushResult {
        while sendCount > 0 {
            let start = book.offsets[sendIndex] + sendOffset
            let end = book.offsets[sendIndex + sendCount]
            let written = write(fd, book.bytes + start, end - start)
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN || errno == EWOULDBLOCK { return .blocked }
                return .failed
            }
            var left = sendOffset + written
            while sendCount > 0 {
                let length = book.offsets[sendIndex + 1] - book.offsets[sendIndex]
                if left < length { break }
                left -= length
                sendCount -= 1
                sendIndex += 1
                if sendIndex == book.keys { sendIndex = 0 }
            }
            sendOffset = left
        }
        return .done
    }

    /// Parses `count` bytes of replies at `bytes`, which arrived at `now`; returns how many replies
    /// they completed.
    func consume(_ bytes: UnsafePointer<UInt8>, _ count: Int, now: UInt64, tally: inout Tally) -> Int {
        var index = 0
        var completed = 0
        while index < count {
            switch state {
            case .start:
                let first = bytes[index]
                switch expect {
                case .agentToken:
                    replyIsGood = first == UInt8(ascii: "O")
                    state = .line
                case .bulkString, .simpleString:
                    index += 1
                    if first == UInt8(ascii: "$") {
                        bulkLength = 0
                        bulkIsNil = false
                        state = .length
                    } else {
                        replyIsGood = first == UInt8(ascii: "+") && expect == .simpleString
                        state = .line
                    }
                }
            case .line:
                let base = UnsafeRawPointer(bytes + index)
                if let newline = memchr(base, 10, count - index) {
                    index += base.distance(to: UnsafeRawPointer(newline)) + 1
                    complete(good: replyIsGood, now: now, tally: &tally)
                    completed += 1
                    state = .start
                } else {
                    index = count
                }
            case .length:
                let byte = bytes[index]
                index += 1
                if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                    bulkLength = bulkLength &* 10 &+ Int(byte &- UInt8(ascii: "0"))
                } else if byte == UInt8(ascii: "-") {
                    bulkIsNil = true
                } else if byte == 10 {
                    if bulkIsNil {
                        complete(good: false, now: now, tally: &tally)
                        completed += 1
                        state = .start
                    } else {
                        bodyLeft = bulkLength + 2
                        state = .body
                    }
                }
            case .body:
                let take = min(bodyLeft, count - index)
                index += take
                bodyLeft -= take
                if bodyLeft == 0 {
                    complete(good: expect == .bulkString, now: now, tally: &tally)
                    completed += 1
                    state = .start
                }
            }
        }
        return completed
    }

    @inline(__always)
    private func complete(good: Bool, now: UInt64, tally: inout Tally) {
        guard outstanding > 0 else {
            // A reply nobody asked for: count it and keep the books straight.
            tally.errors += 1
            return
        }
        let sentAt = stamps[head]
        head += 1
        if head == depth { head = 0 }
        outstanding -= 1
        tally.replies += 1
        if !good {
            tally.errors += 1
        } else if now >= tally.windowStart && now < tally.windowEnd {
            tally.measured += 1
            tally.histogram.record(now &- sentAt)
        }
    }
}
