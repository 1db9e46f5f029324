// AgentHotPath: the agent's cached GET in-process, counted by ordo-one/benchmark's malloc
// interposer. The path that serves the agent's socket (`SocketServingLoop`: the socket loop's
// thread, a `SocketConnection` and the request handler) serves one end of a socket pair in front of
// the real `TokenEngine`, whose provider answers from memory. Each iteration writes one pre-built
// request (one `GET` line, or 32 pipelined in one write) on the other end and reads every reply
// byte back, so everything the agent does for a cached GET is measured: read, frame, parse, access
// check, look up, encode, write, with the loop's wake-ups. The "harness" rows run the same loop
// against a thread that answers with pre-built replies, allocating nothing: what they count is
// the socket pair's and the thread hand-off's own cost, to subtract. See docs/BENCHMARKS-METHOD.md
// ("allocations per socket GET").
import Benchmark
import Foundation
import Logging
import Synchronization
import TokenAgent
import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// A JWT-sized token (683 bytes, the demo issuer's length) in the JWT alphabet.
private let benchToken: String = {
    let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    return String((0..<683).map { alphabet[$0 % alphabet.count] })
}()

/// The provider: a token good for an hour, from memory, for any id.
private struct InProcessProvider: TokenProvider {
    var summary: String { "in-process benchmark provider" }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        FetchedToken(token: benchToken, expiresAtUnixSeconds: Date().timeIntervalSince1970 + 3600)
    }
}

/// How many GET lines the pipelined burst holds, and how many keys are warmed.
private let burstLength = 32
private let warmedKeys = 64

/// The engine and status every benchmark's channels share: warmed once, before any iteration.
private final class Agent: Sendable {
    let engine = TokenEngine(providers: ["vehicle": InProcessProvider()])
    let status: AgentStatus
    let logger = Logger(label: "agent-hot-path")

    init() {
        status = AgentStatus(engine: engine, server: ServerStatistics())
    }

    /// Fetches `bench-0` ... `bench-63` through the provider, so each later GET is a cache hit.
    func warm() async throws {
        for index in 0..<warmedKeys {
            if case .failure(let error) = await engine.get(kind: "vehicle", id: "bench-\(index)") {
                throw error
            }
        }
    }
}

/// The test's end of a socket pair: writes a request and reads its replies back, blocking.
private final class PairEnd {
    let socket: Int32
    private var chunk = [UInt8](repeating: 0, count: 256 * 1024)

    init(_ socket: Int32) { self.socket = socket }

    /// Writes `request` and reads until `replyBytes` bytes came back; the bytes read.
    func roundTrip(_ request: [UInt8], replyBytes: Int) -> Int {
        var sent = 0
        while sent < request.count {
            let count = request[sent...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { fatalError("AgentHotPath: send: \(errno)") }
            sent += count
        }
        var received = 0
        while received < replyBytes {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { fatalError("AgentHotPath: recv: \(count) \(errno)") }
            received += count
        }
        return received
    }

    /// Everything the other end sends for `request`, as text (for the checks before measuring).
    func replies(to request: [UInt8], lines: Int) -> String {
        var text = ""
        _ = request.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        while text.filter({ $0 == "\n" }).count < lines {
            let count = chunk.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard count > 0 else { break }
            text += String(decoding: chunk[..<count], as: UTF8.self)
        }
        return text
    }

    deinit { close(socket) }
}

/// A connected socket pair: the served end and the test's end.
private func socketPair() -> (served: Int32, test: PairEnd) {
    var pair: [Int32] = [-1, -1]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0 else {
        fatalError("AgentHotPath: socketpair: \(errno)")
    }
    return (pair[0], PairEnd(pair[1]))
}

/// Answers each request line on `socket` with `reply`, on a thread of its own, until the other
/// end closes: the socket pair's and the thread hand-off's cost, with nothing of the agent's.
private func startCannedReplies(on socket: Int32, reply: [UInt8]) {
    let socket = socket
    Thread.detachNewThread {
        var input = [UInt8](repeating: 0, count: 64 * 1024)
        var output = [UInt8](repeating: 0, count: reply.count * 64)
        while true {
            let count = input.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            var lines = 0
            for index in 0..<count where input[index] == UInt8(ascii: "\n") { lines += 1 }
            var length = 0
            for _ in 0..<lines {
                output.withUnsafeMutableBytes { raw in
                    reply.withUnsafeBytes {
                        (raw.baseAddress! + length).copyMemory(from: $0.baseAddress!, byteCount: reply.count)
                    }
                }
                length += reply.count
            }
            var sent = 0
            while sent < length {
                let wrote = output[sent..<length].withUnsafeBytes {
                    send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
                }
                if wrote <= 0 { return }
                sent += wrote
            }
        }
        close(socket)
    }
}

/// One warm-up round trip on `end`, then `request` round trips measured.
private func measure(_ benchmark: Benchmark, _ end: PairEnd, _ request: [UInt8], replyBytes: Int) {
    _ = end.roundTrip(request, replyBytes: replyBytes)
    benchmark.startMeasurement()
    for _ in benchmark.scaledIterations {
        blackHole(end.roundTrip(request, replyBytes: replyBytes))
    }
    benchmark.stopMeasurement()
}

/// The loop that serves, started once for every benchmark of the agent's.
private let servingLoop = Mutex<SocketServingLoop?>(nil)

private func serving(_ agent: Agent) throws -> SocketServingLoop {
    try servingLoop.withLock { loop in
        if let loop { return loop }
        let started = try SocketServingLoop(engine: agent.engine, status: agent.status, logger: agent.logger)
        loop = started
        return started
    }
}

/// The reply bytes `request` gets (every line must be a token): what a round trip reads back.
private func checkedReplyBytes(agent: Agent, request: [UInt8], expected: Int) throws -> Int {
    let pair = socketPair()
    try serving(agent).serve(pair.served)
    let text = pair.test.replies(to: request, lines: expected)
    let lines = text.split(separator: "\n")
    guard lines.count == expected, lines.allSatisfy({ $0.hasPrefix("OK ") }) else {
        fatalError("AgentHotPath: unexpected replies: \(text.prefix(200))")
    }
    return text.utf8.count
}

private func request(lines: Int) -> [UInt8] {
    Array((0..<lines).map { "GET vehicle bench-\(lines == 1 ? 1 : $0)\n" }.joined().utf8)
}

let benchmarks: @Sendable () -> Void = {
    let agent = Agent()
    let single = request(lines: 1)
    let burst = request(lines: burstLength)
    let cannedReply = Array("OK \(benchToken) 1900000000\n".utf8)
    let replyBytes = Mutex<[Int: Int]>([:])

    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal, .mallocBytesCount, .freeCountTotal, .wallClock, .throughput, .instructions],
        timeUnits: .nanoseconds,
        warmupIterations: 2,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 200
    )

    let setup: Benchmark.BenchmarkSetupHook = {
        try await agent.warm()
        let one = try checkedReplyBytes(agent: agent, request: single, expected: 1)
        let many = try checkedReplyBytes(agent: agent, request: burst, expected: burstLength)
        replyBytes.withLock { $0 = [1: one, burstLength: many] }
    }

    // One iteration (of the 1,000 an outer iteration scales to) is one request written and its
    // replies read back: one GET, or a burst of 32 in one write. Each outer iteration gets a
    // fresh connection, which answers one request before measuring starts (its buffers and slot
    // ring grown), and is closed after measuring.
    for (name, request, replies) in [("GET", single, 1), ("GET x32 pipelined", burst, burstLength)] {
        Benchmark(
            "agent \(name)",
            closure: { benchmark in
                let pair = socketPair()
                try serving(agent).serve(pair.served)
                measure(benchmark, pair.test, request, replyBytes: replyBytes.withLock { $0[replies] ?? 0 })
            },
            setup: setup
        )

        Benchmark("harness \(name)") { benchmark in
            let pair = socketPair()
            startCannedReplies(on: pair.served, reply: cannedReply)
            measure(benchmark, pair.test, request, replyBytes: cannedReply.count * replies)
        }
    }
}
