// load-gen: a closed-loop load generator for fleet-tokend's line protocol and Redis's inline GET
// over Unix sockets. C connections each keep D pipelined requests outstanding; every reply's
// latency (from the write of its request) goes into an HdrHistogram. See docs/BENCHMARKS-METHOD.md.
import Histogram

#if canImport(Glibc)
    import Glibc
#endif

private func connectUnix(_ path: String) -> Int32 {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { fail("socket: \(String(cString: strerror(errno)))") }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard bytes.count < capacity else { fail("socket path too long: \(path)") }
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        for (index, byte) in bytes.enumerated() { raw[index] = byte }
    }
    let result = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    guard result == 0 else { fail("connect \(path): \(String(cString: strerror(errno)))") }
    return fd
}

private func runThread(_ worker: Worker) -> pthread_t {
    var thread = pthread_t()
    let context = Unmanaged.passRetained(worker).toOpaque()
    let created = pthread_create(
        &thread,
        nil,
        { context in
            let worker = Unmanaged<Worker>.fromOpaque(context!).takeRetainedValue()
            worker.run()
            return nil
        },
        context
    )
    guard created == 0 else { fail("pthread_create: \(String(cString: strerror(created)))") }
    return thread
}

private func main() -> Int32 {
    signal(SIGPIPE, SIG_IGN)
    let options = Options.parse(CommandLine.arguments.dropFirst())
    let book = RequestBook(options: options)
    let expect: Connection.Expect =
        switch options.wire {
        case .agent: .agentToken
        case .redis: options.setBytes > 0 ? .simpleString : .bulkString
        }

    var connections: [Connection] = []
    for index in 0..<options.connections {
        let fd = connectUnix(options.unixPath)
        // Timed runs: each connection walks all the keys from its own starting point, forever.
        // Warm runs: each connection sends its share of the keys once. Counted runs
        // (`--requests N`): each connection sends its share of the N, walking the keys from its
        // starting point.
        let first = index * options.keys / options.connections
        let requests: Int
        if options.warm {
            requests = (index + 1) * options.keys / options.connections - first
        } else if options.requests > 0 {
            requests =
                (index + 1) * options.requests / options.connections - index * options.requests / options.connections
        } else {
            requests = Int.max
        }
        connections.append(
            Connection(
                fd: fd,
                book: book,
                depth: options.depth,
                expect: expect,
                firstRequest: first,
                requests: requests
            )
        )
    }

    let start = monotonicNanoseconds()
    let windowStart = options.isCounted ? 0 : start + UInt64(options.warmup * 1e9)
    let windowEnd = options.isCounted ? UInt64.max : windowStart + UInt64(options.duration * 1e9)
    var workers: [Worker] = []
    for thread in 0..<options.threads {
        let mine = stride(from: thread, to: connections.count, by: options.threads).map { connections[$0] }
        workers.append(Worker(connections: mine, depth: options.depth, windowStart: windowStart, windowEnd: windowEnd))
    }
    let threads = workers.map(runThread)
    for thread in threads { pthread_join(thread, nil) }

    var total = Tally(windowStart: windowStart, windowEnd: windowEnd)
    for worker in workers {
        total.histogram.add(worker.tally.histogram)
        total.measured += worker.tally.measured
        total.replies += worker.tally.replies
        total.errors += worker.tally.errors
        total.brokenConnections += worker.tally.brokenConnections
        total.lastReplyAt = max(total.lastReplyAt, worker.tally.lastReplyAt)
    }
    let seconds = options.isCounted ? Double(total.lastReplyAt &- start) / 1e9 : options.duration
    let report = Report(options: options, tally: total, seconds: seconds)
    print(options.json ? report.json : report.text)
    return total.brokenConnections > 0 ? 1 : 0
}

exit(main())
