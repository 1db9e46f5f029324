// AgentHotPath: the agent's cached GET in-process, counted by ordo-one/benchmark's malloc
// interposer. The real connection pipeline (`TokenSocketServer.addConnectionHandlers`: the line
// frame decoder and the request handler) sits on an `EmbeddedChannel` in front of the real
// `TokenEngine`, whose provider answers from memory. Each iteration writes one pre-built inbound
// buffer (one `GET` line, or 32 pipelined in one buffer) and reads and drops the reply buffers, so
// everything the agent does for a cached GET after the socket read is measured: frame, parse,
// access check, look up, encode, write. The "harness" rows run the same loop with a handler that
// answers with pre-built replies, allocating nothing itself: what they count is the
// EmbeddedChannel's own cost, to subtract. See docs/BENCHMARKS.md ("allocations per socket GET").
import Benchmark
import Foundation
import Logging
import NIOCore
import NIOEmbedded
import TokenAgent
import TokenAgentServer

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

/// Answers every inbound buffer with `replies` pre-built reply buffers and one flush: the
/// EmbeddedChannel's cost of carrying a request in and replies out, with nothing of the agent's.
private final class CannedReplies: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let reply: ByteBuffer
    private let replies: Int

    init(reply: ByteBuffer, replies: Int) {
        self.reply = reply
        self.replies = replies
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        for _ in 0..<replies { context.write(wrapOutboundOut(reply), promise: nil) }
        context.flush()
    }
}

/// An active EmbeddedChannel carrying `handlers`.
private func connectedChannel(_ install: (EmbeddedChannel) throws -> Void) throws -> EmbeddedChannel {
    let channel = EmbeddedChannel()
    try install(channel)
    // Connecting makes the channel active, as an accepted connection is.
    try channel.connect(to: SocketAddress(unixDomainSocketPath: "/tmp/agent-hot-path.sock")).wait()
    return channel
}

/// An active EmbeddedChannel carrying the agent's real per-connection pipeline.
private func agentChannel(_ agent: Agent) throws -> EmbeddedChannel {
    try connectedChannel {
        try TokenSocketServer.addConnectionHandlers(
            to: $0,
            engine: agent.engine,
            status: agent.status,
            logger: agent.logger
        )
    }
}

/// Writes `request` inbound and drops every reply buffer; returns how many reply bytes came out.
@inline(__always)
private func roundTrip(_ channel: EmbeddedChannel, _ request: ByteBuffer) throws -> Int {
    try channel.writeInbound(request)
    var bytes = 0
    while let reply = try channel.readOutbound(as: ByteBuffer.self) { bytes += reply.readableBytes }
    return bytes
}

/// One warm-up round trip on `channel` (its buffers and slot ring grown), then `request` round
/// trips measured, then the channel is closed.
private func measure(_ benchmark: Benchmark, _ channel: EmbeddedChannel, _ request: ByteBuffer) throws {
    _ = try roundTrip(channel, request)
    benchmark.startMeasurement()
    for _ in benchmark.scaledIterations {
        blackHole(try roundTrip(channel, request))
    }
    benchmark.stopMeasurement()
    _ = try? channel.finish()
}

/// The reply lines `request` gets from a fresh channel of the agent's pipeline (a sanity check
/// made before measuring: every one must be a token).
private func checkReplies(agent: Agent, request: ByteBuffer, expected: Int) throws {
    let channel = try agentChannel(agent)
    defer { _ = try? channel.finish() }
    try channel.writeInbound(request)
    var text = ""
    while var reply = try channel.readOutbound(as: ByteBuffer.self) {
        text += reply.readString(length: reply.readableBytes) ?? ""
    }
    let lines = text.split(separator: "\n")
    guard lines.count == expected, lines.allSatisfy({ $0.hasPrefix("OK ") }) else {
        fatalError("AgentHotPath: unexpected replies: \(text.prefix(200))")
    }
}

private func requestBuffer(lines: Int) -> ByteBuffer {
    let text = (0..<lines).map { "GET vehicle bench-\(lines == 1 ? 1 : $0)\n" }.joined()
    return ByteBufferAllocator().buffer(string: text)
}

let benchmarks: @Sendable () -> Void = {
    let agent = Agent()
    let single = requestBuffer(lines: 1)
    let burst = requestBuffer(lines: burstLength)
    let cannedReply = ByteBufferAllocator().buffer(string: "OK \(benchToken) 1900000000\n")

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
        try checkReplies(agent: agent, request: single, expected: 1)
        try checkReplies(agent: agent, request: burst, expected: burstLength)
    }

    // One iteration (of the 1,000 an outer iteration scales to) is one inbound buffer: one GET,
    // or a burst of 32. Each outer iteration gets a fresh channel, which answers one request
    // before measuring starts (its buffers and slot ring grown), and is closed after measuring.
    for (name, request, replies) in [("GET", single, 1), ("GET x32 pipelined", burst, burstLength)] {
        Benchmark(
            "agent \(name)",
            closure: { benchmark in
                let channel = try agentChannel(agent)
                try measure(benchmark, channel, request)
            },
            setup: setup
        )

        Benchmark("harness \(name)") { benchmark in
            let channel = try connectedChannel {
                try $0.pipeline.syncOperations.addHandler(CannedReplies(reply: cannedReply, replies: replies))
            }
            try measure(benchmark, channel, request)
        }
    }
}
