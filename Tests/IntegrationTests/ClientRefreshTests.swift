import FleetTokenClient
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import TestSupport
import Testing

@Suite("FleetTokenClient: refresh after a refusal")
struct ClientRefreshTests {
    @Test func refreshReplacingAsksOnceForEveryRefusedWorker() async throws {
        try await withProviderAndAgent { agent, provider in
            let first = FleetTokenClient(socketPath: agent.socketPath)
            let second = FleetTokenClient(socketPath: agent.socketPath)
            let refused = try await first.token(.vehicle("cr-1"))
            #expect(try await second.token(.vehicle("cr-1")) == refused)
            let fresh = try await first.refresh(.vehicle("cr-1"), replacing: refused)
            #expect(fresh != refused)
            #expect(try await first.token(.vehicle("cr-1")) == fresh, "the memo holds the new token")
            // The other worker was refused the same token: it gets the new one without a fetch.
            #expect(try await second.refresh(.vehicle("cr-1"), replacing: refused) == fresh)
            #expect(provider.requests(for: "cr-1") == 2)
            #expect(try await second.token(.vehicle("cr-1")) == fresh)
        }
    }

    @Test func anOlderAgentGetsAPlainRefresh() async throws {
        let agent = try await OldAgent.start()
        defer { Task { await agent.stop() } }
        let client = FleetTokenClient(socketPath: agent.path)
        let refused = try await client.token(.vehicle("v-1"))
        #expect(refused.jwt == "old-token")
        let fresh = try await client.refresh(.vehicle("v-1"), replacing: refused)
        #expect(fresh.jwt == "new-token")
        // It does not know SHM either: the client asks once (naming the layout it reads), then
        // uses the socket.
        #expect(
            agent.lines == [
                "SHM vehicle 2", "GET vehicle v-1", "REFRESH vehicle v-1 old-token", "REFRESH vehicle v-1",
            ]
        )
    }
}

/// An agent of protocol v1 before REFRESH took a token: it refuses the three-field form with
/// `bad-request`, as the old parser did.
final class OldAgent: Sendable {
    let path: String
    private let channel: any Channel
    private let seen: LineLog

    private init(path: String, channel: any Channel, seen: LineLog) {
        self.path = path
        self.channel = channel
        self.seen = seen
    }

    /// The request lines it received, in order.
    var lines: [String] { seen.all }

    static func start() async throws -> OldAgent {
        let path = TestTemporary.path("ftd-old", suffix: ".sock")
        let seen = LineLog()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(OldAgentHandler(seen: seen))
                }
            }
            .bind(unixDomainSocketPath: path).get()
        return OldAgent(path: path, channel: channel, seen: seen)
    }

    func stop() async {
        try? await channel.close()
        unlink(path)
    }
}

private final class OldAgentHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let seen: LineLog
    private var pending = ""

    init(seen: LineLog) { self.seen = seen }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        pending += buffer.readString(length: buffer.readableBytes) ?? ""
        while let newline = pending.firstIndex(of: "\n") {
            let line = String(pending[..<newline])
            pending.removeSubrange(...newline)
            seen.append(line)
            let fields = line.split(separator: " ")
            let reply: String
            // An hour ahead: clients take no expiry the agent could not serve (WireToken).
            let expiresAt = Int64(Date().timeIntervalSince1970) + 3600
            switch (fields.first, fields.count) {
            case ("GET", _): reply = "OK old-token \(expiresAt)"
            case ("REFRESH", 3): reply = "OK new-token \(expiresAt)"
            case ("REFRESH", _): reply = "ERR bad-request usage: REFRESH <kind> <id>"  // the old parser
            default: reply = "ERR bad-request unknown verb; try HELP"
            }
            context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: reply + "\n")), promise: nil)
        }
    }
}

/// Lines, shared between threads.
final class LineLog: Sendable {
    private let lines = Mutex<[String]>([])

    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}
