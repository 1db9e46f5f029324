import Foundation
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Keeps `depth` requests in flight on one blocking Unix-socket connection to the agent, walking
/// `lines` (request lines, LF included) in turn: each read's completed replies free as many
/// slots, and the requests that refill them go out in one `write`. The client's pipelined rows
/// are measured against this.
func measurePipelined(
    _ name: String,
    path: String,
    lines: [[UInt8]],
    depth: Int,
    operations: Int,
    warmUp: Int = 2000
) throws -> Measurement {
    let fd = UnixSocketAddress.connectStream(to: path)
    guard fd >= 0 else { throw BenchError("connect \(path): \(String(cString: strerror(-fd)))") }
    defer { close(fd) }
    var connection = PipelinedConnection(fd: fd, lines: lines, depth: depth)
    _ = try connection.run(operations: warmUp)
    let clock = ContinuousClock()
    let started = clock.now
    let latencies = try connection.run(operations: operations)
    let total = clock.now - started
    return Measurement(
        name: name,
        concurrency: depth,
        operations: operations,
        seconds: Double(total.components.attoseconds) / 1e18 + Double(total.components.seconds),
        latencies: latencies.sorted()
    )
}

private struct PipelinedConnection {
    let fd: Int32
    let lines: [[UInt8]]
    let depth: Int
    var nextLine = 0
    var buffer = [UInt8](repeating: 0, count: 256 * 1024)
    var batch: [UInt8] = []
    var atLineStart = true

    init(fd: Int32, lines: [[UInt8]], depth: Int) {
        self.fd = fd
        self.lines = lines
        self.depth = depth
    }

    /// Runs `operations` requests, at most `depth` in flight; their latencies in seconds.
    mutating func run(operations: Int) throws -> [Double] {
        let clock = ContinuousClock()
        var sentAt: [ContinuousClock.Instant] = []
        sentAt.reserveCapacity(operations)
        var latencies: [Double] = []
        latencies.reserveCapacity(operations)
        try send(min(depth, operations), recording: &sentAt, clock.now)
        while latencies.count < operations {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { throw BenchError("read failed") }
            let now = clock.now
            let completed = try countReplies(count)
            for index in latencies.count..<(latencies.count + completed) {
                let elapsed = now - sentAt[index]
                latencies.append(Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds))
            }
            try send(min(completed, operations - sentAt.count), recording: &sentAt, now)
        }
        return latencies
    }

    /// Writes the next `count` requests in one `write`.
    private mutating func send(
        _ count: Int,
        recording sentAt: inout [ContinuousClock.Instant],
        _ now: ContinuousClock.Instant
    ) throws {
        guard count > 0 else { return }
        batch.removeAll(keepingCapacity: true)
        for _ in 0..<count {
            batch += lines[nextLine]
            nextLine = (nextLine + 1) % lines.count
            sentAt.append(now)
        }
        let written = batch.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == batch.count else { throw BenchError("short write") }
    }

    /// Counts the replies the first `count` bytes of the buffer complete; each must be `OK …`.
    private mutating func countReplies(_ count: Int) throws -> Int {
        var completed = 0
        var start = 0
        try buffer.withUnsafeBytes { raw in
            let base = raw.baseAddress!
            while start < count {
                if atLineStart, raw[start] != UInt8(ascii: "O") { throw BenchError("error reply") }
                guard let newline = memchr(base + start, 0x0A, count - start) else {
                    atLineStart = false
                    return
                }
                completed += 1
                atLineStart = true
                start = base.distance(to: UnsafeRawPointer(newline)) + 1
            }
        }
        return completed
    }
}
