import Logging
import NIOCore
import NIOEmbedded
import Testing
import TokenAgent
import TokenWire

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// Counts the reads that reach the head of the pipeline: whether the handler lets reading go on.
private final class ReadCounter: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    var reads = 0

    func read(context: ChannelHandlerContext) {
        reads += 1
        context.read()
    }
}

/// The real frame decoder and request handler on an `EmbeddedChannel`, with the real engine.
private struct Connection {
    let channel = EmbeddedChannel()
    let counter = ReadCounter()
    let status: AgentStatus

    init(
        rules: AccessRules = .open(agentUID: 4_000_000),
        peer: PeerCredentials? = PeerCredentials(pid: 1, uid: 1000, gid: 1000),
        admission: ServerStatistics.Admission = .admitted,
        requestTimeout: TimeAmount = .seconds(10),
        health: AgentHealth = AgentHealth(),
        mirror: (any TokenMirror)? = nil
    ) throws {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider(), "trip": InstantProvider()], mirror: mirror)
        // Cached tokens answer at once, on the channel's own thread; only `hang-` ids fetch.
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3600
        engine.importTokens([
            CachedToken(kind: "vehicle", id: "v-1", token: "tok-v-1", expiresAt: expiresAt),
            CachedToken(kind: "trip", id: "t-1", token: "tok-t-1", expiresAt: expiresAt),
        ])
        status = AgentStatus(
            engine: engine,
            server: ServerStatistics(),
            access: AccessControl(rules: rules),
            health: health
        )
        try channel.pipeline.syncOperations.addHandlers([
            counter,
            ChannelRequestHandler(
                RequestHandler(
                    engine: engine,
                    status: status,
                    logger: Logger(label: "test"),
                    admission: admission,
                    peer: peer,
                    requestTimeout: requestTimeout
                )
            ),
        ])
        // Connecting makes the channel active (and fires channelActive), as an accepted one is.
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/tmp/unused.sock")).wait()
    }

    func send(_ text: String) throws {
        try channel.writeInbound(channel.allocator.buffer(string: text))
    }

    /// Every reply line written so far, once the work the connection left for later turns (past
    /// its share of one turn: ``RequestHandler/workPerTurn``) has run.
    func replies() throws -> [String] {
        channel.embeddedEventLoop.run()
        var text = ""
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
            text += buffer.readString(length: buffer.readableBytes) ?? ""
        }
        return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
    }
}

/// A monotonic clock the test moves by hand.
private final class SteppedClock: AgentClock, @unchecked Sendable {
    var monotonicSeconds = 100.0
    var wallSeconds: Double { 1_800_000_000 + monotonicSeconds }
}

@Suite("Request handler on an EmbeddedChannel")
struct RequestHandlerTests {
    @Test func pingTellsWhenTheRefresherStalled() throws {
        let clock = SteppedClock()
        let heartbeat = Heartbeat(clock: clock)
        let connection = try Connection(
            health: AgentHealth(settings: HealthSettings(refresherStallAfter: 10), heartbeat: heartbeat)
        )
        try connection.send("PING\n")
        #expect(try connection.replies() == ["PONG"])
        clock.monotonicSeconds += 10.5
        try connection.send("PING\n")
        #expect(try connection.replies() == ["ERR unavailable refresher stalled"])
        heartbeat.beat()
        try connection.send("PING\n")
        #expect(try connection.replies() == ["PONG"], "a pass of the refresher brings it back")
        _ = try? connection.channel.finish()
    }

    @Test func metricsIsOneReplyEndedByEOFAndInfoShowsNoToken() throws {
        let connection = try Connection()
        try connection.send("GET vehicle v-1\nMETRICS\nINFO vehicle v-1\nINFO vehicle none\nINFO lorry x\nPING\n")
        let replies = try connection.replies()
        let end = try #require(replies.firstIndex(of: "# EOF"))
        #expect(replies.first?.hasPrefix("OK tok-v-1 ") == true)
        #expect(replies[1].hasPrefix("# "), "the exposition starts with a comment line")
        #expect(replies[1..<end].contains("fleet_tokend_requests_total{verb=\"GET\",code=\"ok\"} 1"))
        #expect(replies[end + 1].hasPrefix("OK cached=yes token=yes fingerprint="))
        #expect(!replies[end + 1].contains("tok-v-1"), "INFO never shows the token")
        #expect(replies[end + 2] == "OK cached=no")
        #expect(replies[end + 3].hasPrefix("ERR bad-kind kind lorry is not configured"))
        #expect(replies[end + 4] == "PONG")
        #expect(replies.count == end + 5)
        _ = try? connection.channel.finish()
    }

    @Test func pipelinedGETsAreAnsweredInOrderFromTheSegments() throws {
        let segments = SharedSegments(
            kinds: ["vehicle", "trip"],
            policy: RefreshPolicy(),
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        let connection = try Connection(mirror: segments)
        #expect(segments.statistics().slotsUsed == 2, "the cached tokens are in the segments")
        // A GET first in line is written from the segment straight into the output; one behind
        // another reply (STATS, or a GET of an unknown kind) is copied into its slot: both in order.
        try connection.send(
            "GET vehicle v-1\nGET trip t-1\nSTATS\nGET trip t-1\nGET lorry x\nGET vehicle v-1 600\nPING\n"
        )
        let replies = try connection.replies()
        #expect(replies.count == 7)
        #expect(replies[0].hasPrefix("OK tok-v-1 "))
        #expect(replies[1].hasPrefix("OK tok-t-1 "))
        #expect(replies[2].hasPrefix("OK "), "STATS")
        #expect(replies[3].hasPrefix("OK tok-t-1 "))
        #expect(replies[4].hasPrefix("ERR bad-kind"))
        #expect(replies[5].hasPrefix("OK tok-v-1 "))
        #expect(replies[6] == "PONG")
        try connection.send("METRICS\n")
        #expect(
            try connection.replies().contains("fleet_tokend_requests_total{verb=\"GET\",code=\"ok\"} 4"),
            "each OK counted once"
        )
        _ = try? connection.channel.finish()
    }

    @Test func metricsAndInfoAreForAdmins() throws {
        var admin = AccessRules.Principals()
        admin.uids = [0]
        let connection = try Connection(rules: AccessRules(allow: [:], admin: admin, agentUID: 4_000_000))
        try connection.send("METRICS\nINFO vehicle v-1\nPING\n")
        #expect(
            try connection.replies() == [
                "ERR denied METRICS is for the agent's admins", "ERR denied INFO is for the agent's admins", "PONG",
            ]
        )
        #expect(connection.status.access.deniedPerKind == ["admin": 2])
        _ = try? connection.channel.finish()
    }
    @Test func pipelinedRepliesStopReadingAtTheLimitAndResume() throws {
        let connection = try Connection()
        // A fetch that never ends holds the head of the queue; everything after it waits.
        try connection.send("GET vehicle hang-1\n")
        try connection.send(String(repeating: "PING\n", count: RequestHandler.maxPending - 2))
        // More lines than one turn takes: the rest are taken in the connection's next turns.
        connection.channel.embeddedEventLoop.run()
        connection.channel.read()
        #expect(connection.counter.reads == 1, "under the limit, reading goes on")
        try connection.send("PING\n")
        connection.channel.read()
        #expect(connection.counter.reads == 1, "at \(RequestHandler.maxPending) owed replies, reading pauses")
        #expect(try connection.replies().isEmpty, "replies keep request order behind the slow fetch")
        _ = try? connection.channel.finish()
    }

    @Test func aClientThatDoesNotReadPausesReadingUntilWritable() throws {
        let connection = try Connection()
        try connection.send("PING\n")
        #expect(try connection.replies() == ["PONG"])
        connection.channel.isWritable = false
        connection.channel.read()
        #expect(connection.counter.reads == 0)
        connection.channel.isWritable = true
        connection.channel.pipeline.fireChannelWritabilityChanged()
        #expect(connection.counter.reads == 1, "reading resumes once the client drains its replies")
        _ = try? connection.channel.finish()
    }

    @Test func theLineLimitIs4096BytesAndALongerLineClosesTheConnection() throws {
        let connection = try Connection()
        try connection.send("GET vehicle " + String(repeating: "x", count: 4096 - 12) + "\r\n")
        #expect(try connection.replies().first?.hasPrefix("ERR bad-id") == true, "4096 bytes is still a line")
        try connection.send("GET vehicle " + String(repeating: "x", count: 4097 - 12) + "\nPING\n")
        #expect(try connection.replies() == ["ERR bad-request line too long"], "nothing after it is answered")
        #expect(!connection.channel.isActive)
    }

    @Test func aPartialLineTimesOutWhileReading() throws {
        let connection = try Connection(requestTimeout: .seconds(10))
        #expect(connection.channel.isActive)
        try connection.send("PING\nGET veh")
        #expect(try connection.replies() == ["PONG"])
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(try connection.replies().isEmpty)
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try connection.replies() == ["ERR bad-request request timed out"])
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(2))
        #expect(!connection.channel.isActive, "the connection is closed")
    }

    @Test func aLineFinishedInTimeCancelsTheClockAndIdleConnectionsStay() throws {
        let connection = try Connection(requestTimeout: .seconds(10))
        try connection.send("GET veh")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        try connection.send("icle v-1\n")
        #expect(try connection.replies().first?.hasPrefix("OK tok-v-1 ") == true)
        try connection.send("PI")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        try connection.send("NG\n")
        #expect(try connection.replies() == ["PONG"], "each line has its own 10 s")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(3600))
        #expect(try connection.replies() == [])
        #expect(connection.channel.isActive, "an idle connection with nothing pending is kept")
        try connection.send("PING\n")
        #expect(try connection.replies().last == "PONG")
        _ = try? connection.channel.finish()
    }

    @Test func thePartialLineClockPausesWhileReadingIsPaused() throws {
        let connection = try Connection(requestTimeout: .seconds(10))
        connection.channel.isWritable = false
        connection.channel.read()  // reading pauses: the client does not read its replies
        try connection.send("GET veh")
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(60))
        #expect(try connection.replies().isEmpty, "not the client's fault while the agent does not read")
        connection.channel.isWritable = true
        connection.channel.pipeline.fireChannelWritabilityChanged()
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(try connection.replies() == ["ERR bad-request request timed out"])
    }

    @Test func rulesAreCheckedOnEveryRequest() throws {
        var vehicle = AccessRules.Principals()
        vehicle.uids = [1000]
        var admin = AccessRules.Principals()
        admin.gids = [50]
        let rules = AccessRules(allow: ["vehicle": vehicle], admin: admin, agentUID: 4_000_000)
        let allowed = try Connection(rules: rules, peer: PeerCredentials(pid: 7, uid: 1000, gid: 1000))
        try allowed.send("GET vehicle v-1\nSTATS\nDROP vehicle v-1\n")
        let allowedReplies = try allowed.replies()
        #expect(allowedReplies.count == 3)
        #expect(allowedReplies.first?.hasPrefix("OK tok-v-1 ") == true, "uid 1000 may ask for vehicle")
        #expect(
            Array(allowedReplies.dropFirst()) == [
                "ERR denied STATS is for the agent's admins", "ERR denied DROP is for the agent's admins",
            ]
        )

        // An admin by supplementary group, not allowed vehicle; trip has no rules.
        let other = try Connection(rules: rules, peer: PeerCredentials(pid: 8, uid: 1001, gid: 1001, groups: [50]))
        try other.send("GET vehicle v-1\nGET trip t-1\nSTATS\nREFRESH vehicle v-1 tok-v-1\nDROP vehicle v-1\n")
        let replies = try other.replies()
        #expect(replies.count == 5)
        #expect(replies.first == "ERR denied not allowed to ask for kind vehicle")
        #expect(replies.dropFirst().first?.hasPrefix("OK tok-t-1 ") == true)
        #expect(replies.dropFirst(2).first?.hasPrefix("OK entries=2 ") == true, "STATS for an admin")
        #expect(replies.dropFirst(3).first == "ERR denied not allowed to ask for kind vehicle")
        #expect(replies.last == "ERR denied not allowed to ask for kind vehicle", "DROP needs the kind too")
        #expect(other.status.access.denied == 3)
        #expect(other.status.statsText().contains(" denied=3"))

        let unknown = try Connection(rules: rules, peer: nil)
        try unknown.send("GET vehicle v-1\nSTATS\nPING\n")
        #expect(
            try unknown.replies() == [
                "ERR denied not allowed to ask for kind vehicle", "ERR denied STATS is for the agent's admins", "PONG",
            ]
        )
        #expect(unknown.status.access.denied == 2)
        let root = try Connection(rules: rules, peer: PeerCredentials(pid: 9, uid: 0, gid: 0))
        try root.send("STATS\n")
        #expect(try root.replies().first?.hasPrefix("OK entries=") == true, "uid 0 is always admin")
    }

    @Test func connectionsOverALimitAreToldWhyAndClosed() throws {
        let connection = try Connection(admission: .tooManyForUID(1000))
        #expect(try connection.replies() == ["ERR busy too many connections for uid 1000"])
        try connection.send("PING\n")
        #expect(try connection.replies().isEmpty, "nothing more is answered")
    }
}

@Suite("Connection limits and peer credentials")
struct ConnectionLimitTests {
    @Test func perUIDLimitLeavesOtherUsersRoom() {
        let server = ServerStatistics()
        #expect(server.admit(limit: 10, uid: 1000, perUIDLimit: 2) == .admitted)
        #expect(server.admit(limit: 10, uid: 1000, perUIDLimit: 2) == .admitted)
        #expect(server.admit(limit: 10, uid: 1000, perUIDLimit: 2) == .tooManyForUID(1000))
        #expect(server.admit(limit: 10, uid: 1001, perUIDLimit: 2) == .admitted)
        server.release(uid: 1000)
        #expect(server.admit(limit: 10, uid: 1000, perUIDLimit: 2) == .admitted)
        #expect(server.openConnections == 3)
        #expect(server.refusedConnections == 1)
        #expect(server.admit(limit: 3, uid: 1002, perUIDLimit: 0) == .tooManyConnections)
        #expect(server.admit(limit: 10, uid: 1000, perUIDLimit: 0) == .admitted, "0 is no per-uid limit")
    }

    @Test func peerCredentialsAreThePeersOwnIDsAndGroups() throws {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { for fd in pair { close(fd) } }
        let peer = try #require(PeerCredentialsReader.read(socket: pair[0]))
        #expect(peer.pid == getpid())
        #expect(peer.uid == getuid())
        #expect(peer.gid == getgid())
        var groups = [gid_t](repeating: 0, count: 256)
        let count = getgroups(Int32(groups.count), &groups)
        #expect(Set(peer.groups) == Set(groups.prefix(Int(max(0, count)))))
        #expect(PeerCredentialsReader.read(socket: -1) == nil, "no socket, no peer")
    }
}

@Suite("Request handler: the fast path and write batching")
struct RequestHandlerFastPathTests {
    /// The outbound buffers written so far, each as text.
    private func writes(_ connection: Connection) throws -> [String] {
        var writes: [String] = []
        while var buffer = try connection.channel.readOutbound(as: ByteBuffer.self) {
            writes.append(buffer.readString(length: buffer.readableBytes) ?? "")
        }
        return writes
    }

    @Test func aBurstOfRequestsIsWrittenOnceAtTheEndOfTheRead() throws {
        let connection = try Connection()
        try connection.send("GET vehicle v-1\nPING\nGET trip t-1\nGET vehicle v-1 60\nSTATS\n")
        let writes = try writes(connection)
        #expect(writes.count == 1, "one write for the burst, not one per reply: \(writes)")
        let lines = writes.joined().split(separator: "\n").map(String.init)
        #expect(lines.count == 5)
        #expect(lines[0].hasPrefix("OK tok-v-1 "))
        #expect(lines[1] == "PONG")
        #expect(lines[2].hasPrefix("OK tok-t-1 "))
        #expect(lines[3] == lines[0])
        #expect(lines[4].hasPrefix("OK entries=2 hits=3 "))
        _ = try? connection.channel.finish()
    }

    @Test func theFastPathAnswersWhatTheParserWould() throws {
        let connection = try Connection()
        // Recognised by the fast path, then forms only the parser takes: the same token each time.
        let forms = [
            "GET vehicle v-1", "GET vehicle v-1\r", "get vehicle v-1", "GET  vehicle v-1", "GET vehicle v-1 ",
            "Get vehicle v-1 300",
        ]
        try connection.send(forms.map { $0 + "\n" }.joined())
        let replies = try connection.replies()
        #expect(replies.count == forms.count)
        let expected = replies.first ?? ""
        #expect(expected.hasPrefix("OK tok-v-1 "))
        for (form, reply) in zip(forms, replies) { #expect(reply == expected, "\(form.debugDescription)") }
        _ = try? connection.channel.finish()
    }

    @Test func theFastPathKeepsErrorsAndRules() throws {
        let connection = try Connection(
            rules: AccessRules(allow: ["trip": AccessRules.Principals(uids: [42])], admin: nil, agentUID: 4_000_000)
        )
        try connection.send("GET lorry v-1\nGET trip t-1\nGET vehicle a/b\nGET vehicle v-1 999999\n")
        let replies = try connection.replies()
        #expect(replies.count == 4)
        #expect(replies[0].hasPrefix("ERR bad-kind kind lorry is not configured"))
        #expect(replies[1].hasPrefix("ERR denied"))
        #expect(replies[2].hasPrefix("ERR bad-id"))
        #expect(replies[3].hasPrefix("ERR bad-request"))
        _ = try? connection.channel.finish()
    }

    @Test func aReloadChangesTheKindsTheFastPathKnows() throws {
        let connection = try Connection()
        let engine = connection.status.engine
        try connection.send("GET trip t-1\n")
        #expect(try connection.replies().first?.hasPrefix("OK tok-t-1 ") == true)
        engine.reconfigure(providers: ["vehicle": InstantProvider()], policy: engine.policy, changedKinds: [])
        try connection.send("GET trip t-1\nGET vehicle v-1\n")
        let replies = try connection.replies()
        #expect(replies.first == "ERR bad-kind kind trip is not configured; configured: vehicle")
        #expect(replies.last?.hasPrefix("OK tok-v-1 ") == true, "an unchanged kind keeps its tokens")
        _ = try? connection.channel.finish()
    }

    @Test func expiriesAreWrittenInDecimalWhateverTheirLength() throws {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let far = Int64(SystemAgentClock().wallSeconds) + 86_400 * 365 * 1000
        engine.importTokens([CachedToken(kind: "vehicle", id: "far", token: "tok-far", expiresAt: far)])
        let status = AgentStatus(engine: engine, server: ServerStatistics())
        let channel = EmbeddedChannel()
        try TokenSocketServer.addConnectionHandlers(
            to: channel,
            engine: engine,
            status: status,
            logger: Logger(label: "t")
        )
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/tmp/unused.sock")).wait()
        try channel.writeInbound(channel.allocator.buffer(string: "GET vehicle far\n"))
        var reply = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(reply.readString(length: reply.readableBytes) == "OK tok-far \(far)\n")
        _ = try? channel.finish()
    }
}

@Suite("Token reply encoding")
struct TokenReplyEncodingTests {
    @Test func theEncodedReplyIsTheWireReplyLine() {
        for expiresAt: Int64 in [0, 7, 9, 10, 99, 1_800_000_000, 9_999_999_999, -1, -10, Int64.max, Int64.min + 1] {
            var buffer = ByteBuffer()
            RequestHandler.encodeToken(ServedToken(token: "tok-é.x", expiresAt: expiresAt), into: &buffer)
            RequestHandler.encodeToken(ServedToken(token: "t", expiresAt: expiresAt), into: &buffer)
            let expected =
                WireReply.token("tok-é.x", expiresAt: expiresAt).line + WireReply.token("t", expiresAt: expiresAt).line
            #expect(buffer.readString(length: buffer.readableBytes) == expected)
        }
    }
}
