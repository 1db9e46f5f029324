import Foundation
import Logging
import NIOCore
import Synchronization
import TestSupport
import Testing
import TokenAgent
import TokenWire

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// A monotonic clock the test moves by hand (the loop's thread reads it).
private final class SteppedClock: AgentClock {
    private let seconds = Mutex(100.0)
    var monotonicSeconds: Double { seconds.withLock { $0 } }
    var wallSeconds: Double { 1_800_000_000 + monotonicSeconds }
    func advance(by step: Double) { seconds.withLock { $0 += step } }
}

/// The request handler end to end on the transport the agent serves with: the socket loop, a
/// `SocketConnection` and a socket pair (``ServedConnection``). Its behaviour in time (time-outs,
/// lingering, stalls, pacing) is tested without sockets or sleeps, in
/// `RequestHandlerBehaviourTests`.
@Suite("Request handler on the socket loop")
struct RequestHandlerTests {
    @Test func pingTellsWhenTheRefresherStalled() async throws {
        let clock = SteppedClock()
        let heartbeat = RefresherHeartbeat(clock: clock)
        let connection = try ServedConnection(
            health: AgentHealth(settings: HealthSettings(refresherStallAfter: 10), heartbeat: heartbeat)
        )
        try await connection.send("PING\n")
        #expect(try await connection.lines(1) == ["PONG"])
        clock.advance(by: 10.5)
        try await connection.send("PING\n")
        #expect(try await connection.lines(1) == ["ERR unavailable refresher stalled"])
        heartbeat.beat()
        try await connection.send("PING\n")
        #expect(try await connection.lines(1) == ["PONG"], "a pass of the refresher brings it back")
        #expect(connection.repliesWaiting == 0, "one reply a request")
        await connection.finish()
    }

    @Test func metricsIsOneReplyEndedByEOFAndInfoShowsNoToken() async throws {
        let connection = try ServedConnection()
        let replies = try await connection.replies(
            to: "GET vehicle v-1\nMETRICS\nINFO vehicle v-1\nINFO vehicle none\nINFO lorry x\nPING\n"
        )
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
        await connection.finish()
    }

    @Test func pipelinedGETsAreAnsweredInOrderFromTheSegments() async throws {
        let segments = SharedSegments(
            kinds: ["vehicle", "trip"],
            policy: RefreshPolicy(),
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        let connection = try ServedConnection(storage: segments)
        #expect(segments.statistics().slotsUsed == 2, "the cached tokens are in the segments")
        // A GET first in line is written from the segment straight into the output; one behind
        // another reply (STATS, or a GET of an unknown kind) is copied into its slot: both in order.
        let replies = try await connection.replies(
            to: "GET vehicle v-1\nGET trip t-1\nSTATS\nGET trip t-1\nGET lorry x\nGET vehicle v-1 600\nPING\n"
        )
        #expect(replies.count == 7)
        #expect(replies[0].hasPrefix("OK tok-v-1 "))
        #expect(replies[1].hasPrefix("OK tok-t-1 "))
        #expect(replies[2].hasPrefix("OK "), "STATS")
        #expect(replies[3].hasPrefix("OK tok-t-1 "))
        #expect(replies[4].hasPrefix("ERR bad-kind"))
        #expect(replies[5].hasPrefix("OK tok-v-1 "))
        #expect(replies[6] == "PONG")
        #expect(
            try await connection.replies(to: "METRICS\n")
                .contains("fleet_tokend_requests_total{verb=\"GET\",code=\"ok\"} 4"),
            "each OK counted once"
        )
        await connection.finish()
    }

    @Test func metricsAndInfoAreForAdmins() async throws {
        var admin = AccessRules.Principals()
        admin.uids = [0]
        let connection = try ServedConnection(rules: AccessRules(allow: [:], admin: admin, agentUID: 4_000_000))
        #expect(
            try await connection.replies(to: "METRICS\nINFO vehicle v-1\nPING\n") == [
                "ERR denied METRICS is for the agent's admins", "ERR denied INFO is for the agent's admins", "PONG",
            ]
        )
        #expect(connection.status.access.deniedPerKind == ["admin": 2])
        await connection.finish()
    }

    @Test func pipelinedRepliesStopReadingAtTheLimitAndResume() async throws {
        let connection = try ServedConnection()
        // A fetch that never ends holds the head of the queue; everything after it waits.
        try await connection.send(
            "GET vehicle hang-1\n" + String(repeating: "PING\n", count: RequestHandler.maxPending - 2)
        )
        // More lines than one turn takes: the rest are taken in the connection's next turns, and
        // then the connection reads on.
        let under = ServedConnection.State(reading: true, writable: true, unread: 0)
        #expect(await eventually { await connection.state() == under }, "under the limit, reading goes on")
        try await connection.send("PING\n")
        let paused = ServedConnection.State(reading: false, writable: true, unread: 0)
        #expect(
            await eventually { await connection.state() == paused },
            "at \(RequestHandler.maxPending) owed replies, reading pauses"
        )
        try await connection.send("PING\n")
        #expect(await connection.state().unread == 5, "what the client sends now waits in the socket")
        #expect(connection.repliesWaiting == 0, "replies keep request order behind the slow fetch")
        await connection.finish()
    }

    @Test func aClientThatDoesNotReadPausesReadingUntilWritable() async throws {
        // A small send buffer: the replies back up in the agent's output soon.
        let connection = try ServedConnection(sendBuffer: 4096)
        #expect(try await connection.replies(to: "") == [])
        // The client asks for more than the socket and the output's high-water mark hold, and
        // reads nothing: the output stays over its mark.
        try await connection.send(String(repeating: "METRICS\n", count: 40))
        let overMark = await eventually { await connection.state().writable == false }
        #expect(overMark, "the output goes over its mark")
        // What the client sends next is read (the socket is still watched for input), but not
        // answered, and reading pauses after that read.
        try await connection.send("PING\n")
        let held = ServedConnection.State(reading: false, writable: false, unread: 0)
        let paused = await eventually { await connection.state() == held }
        let state = await connection.state()
        #expect(paused, "reading pauses while the output is over its mark: \(state)")
        try await connection.send("PING\n")
        #expect(await connection.state().unread == 5, "what the client sends now waits in the socket")
        // The client drains its replies: every one comes, and reading resumes.
        var lines = try await connection.lines(through: "PONG")
        lines += try await connection.lines(through: "PONG")
        #expect(lines.count { $0 == "# EOF" } == 40, "every METRICS reply, then the PONGs")
        #expect(lines.count { $0 == "PONG" } == 2)
        #expect(await connection.state().reading, "reading resumes once the client drains its replies")
        await connection.finish()
    }

    @Test func repliesTheSocketTookInPartsArriveWholeAndInOrder() async throws {
        // A small send buffer, and a client that reads nothing until the agent's output is over
        // its mark. A turn's replies (64 HELPs, 4,416 bytes) fit the empty socket once; the next
        // turn's send is partial, and the rest of it is copied and written later, behind which
        // the later turns' replies wait.
        let connection = try ServedConnection(sendBuffer: 4096)
        let help = "OK GET REFRESH DROP INFO PING STATS METRICS HELP QUIT SHM TOUCH WARM"
        try await connection.send(String(repeating: "HELP\n", count: 4000))
        #expect(await eventually { await connection.state().writable == false }, "the output goes over its mark")
        let lines = try await connection.lines(4000)
        #expect(lines == Array(repeating: help, count: 4000), "every reply, whole, in order")
        await connection.finish()
    }

    @Test func theLineLimitIs4096BytesAndALongerLineClosesTheConnection() async throws {
        let connection = try ServedConnection()
        try await connection.send("GET vehicle " + String(repeating: "x", count: 4096 - 12) + "\r\n")
        #expect(try await connection.lines(1).first?.hasPrefix("ERR bad-id") == true, "4096 bytes is still a line")
        try await connection.send("GET vehicle " + String(repeating: "x", count: 4097 - 12) + "\nPING\n")
        #expect(try await connection.readToEnd() == ["ERR bad-request line too long"], "nothing after it is answered")
        #expect(await connection.waitUntilClosed(), "the connection is closed")
        await connection.finish()
    }

    @Test func rulesAreCheckedOnEveryRequest() async throws {
        var vehicle = AccessRules.Principals()
        vehicle.uids = [1000]
        var admin = AccessRules.Principals()
        admin.gids = [50]
        let rules = AccessRules(allow: ["vehicle": vehicle], admin: admin, agentUID: 4_000_000)
        let allowed = try ServedConnection(rules: rules, peer: PeerCredentials(pid: 7, uid: 1000, gid: 1000))
        let allowedReplies = try await allowed.replies(to: "GET vehicle v-1\nSTATS\nDROP vehicle v-1\n")
        #expect(allowedReplies.count == 3)
        #expect(allowedReplies.first?.hasPrefix("OK tok-v-1 ") == true, "uid 1000 may ask for vehicle")
        #expect(
            Array(allowedReplies.dropFirst()) == [
                "ERR denied STATS is for the agent's admins", "ERR denied DROP is for the agent's admins",
            ]
        )
        await allowed.finish()

        // An admin by supplementary group, not allowed vehicle; trip has no rules.
        let other = try ServedConnection(
            rules: rules,
            peer: PeerCredentials(pid: 8, uid: 1001, gid: 1001, groups: [50])
        )
        let replies = try await other.replies(
            to: "GET vehicle v-1\nGET trip t-1\nSTATS\nREFRESH vehicle v-1 tok-v-1\nDROP vehicle v-1\n"
        )
        #expect(replies.count == 5)
        #expect(replies.first == "ERR denied not allowed to ask for kind vehicle")
        #expect(replies.dropFirst().first?.hasPrefix("OK tok-t-1 ") == true)
        #expect(replies.dropFirst(2).first?.hasPrefix("OK entries=2 ") == true, "STATS for an admin")
        #expect(replies.dropFirst(3).first == "ERR denied not allowed to ask for kind vehicle")
        #expect(replies.last == "ERR denied not allowed to ask for kind vehicle", "DROP needs the kind too")
        #expect(other.status.access.denied == 3)
        #expect(try other.status.statsReplyText().contains(" denied=3"))
        await other.finish()

        let unknown = try ServedConnection(rules: rules, peer: nil)
        #expect(
            try await unknown.replies(to: "GET vehicle v-1\nSTATS\nPING\n") == [
                "ERR denied not allowed to ask for kind vehicle", "ERR denied STATS is for the agent's admins", "PONG",
            ]
        )
        #expect(unknown.status.access.denied == 2)
        await unknown.finish()
        let root = try ServedConnection(rules: rules, peer: PeerCredentials(pid: 9, uid: 0, gid: 0))
        #expect(try await root.replies(to: "STATS\n").first?.hasPrefix("OK entries=") == true, "uid 0 is always admin")
        await root.finish()
    }

    @Test func connectionsOverALimitAreToldWhyAndClosed() async throws {
        let connection = try ServedConnection(admission: .tooManyForUID(1000))
        #expect(try await connection.lines(1) == ["ERR busy too many connections for uid 1000"])
        // The agent may have closed already: the send may fail.
        try? await connection.send("PING\n")
        #expect(try await connection.readToEnd() == [], "nothing more is answered")
        #expect(await connection.waitUntilClosed())
        await connection.finish()
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
    @Test func aBurstOfRequestsIsWrittenOnceAtTheEndOfTheRead() async throws {
        // A sequenced-packet pair keeps each of the agent's sends one record.
        let connection = try ServedConnection(type: Int32(SOCK_SEQPACKET.rawValue))
        try await connection.send("GET vehicle v-1\nPING\nGET trip t-1\nGET vehicle v-1 60\nSTATS\n")
        let burst = try await connection.record()
        let lines = burst.split(separator: "\n").map(String.init)
        #expect(lines.count == 5, "one write for the burst, not one per reply: \(burst.debugDescription)")
        #expect(lines[0].hasPrefix("OK tok-v-1 "))
        #expect(lines[1] == "PONG")
        #expect(lines[2].hasPrefix("OK tok-t-1 "))
        #expect(lines[3] == lines[0])
        #expect(lines[4].hasPrefix("OK entries=2 hits=3 "))
        try await connection.send("PING\n")
        #expect(try await connection.record() == "PONG\n", "nothing else was written for the burst")
        await connection.finish()
    }

    @Test func theFastPathAnswersWhatTheParserWould() async throws {
        let connection = try ServedConnection()
        // Recognised by the fast path, then forms only the parser takes: the same token each time.
        let forms = [
            "GET vehicle v-1", "GET vehicle v-1\r", "get vehicle v-1", "GET  vehicle v-1", "GET vehicle v-1 ",
            "Get vehicle v-1 300",
        ]
        let replies = try await connection.replies(to: forms.map { $0 + "\n" }.joined())
        #expect(replies.count == forms.count)
        let expected = replies.first ?? ""
        #expect(expected.hasPrefix("OK tok-v-1 "))
        for (form, reply) in zip(forms, replies) { #expect(reply == expected, "\(form.debugDescription)") }
        await connection.finish()
    }

    @Test func theFastPathKeepsErrorsAndRules() async throws {
        let connection = try ServedConnection(
            rules: AccessRules(allow: ["trip": AccessRules.Principals(uids: [42])], admin: nil, agentUID: 4_000_000)
        )
        let replies = try await connection.replies(
            to: "GET lorry v-1\nGET trip t-1\nGET vehicle a/b\nGET vehicle v-1 999999\n"
        )
        #expect(replies.count == 4)
        #expect(replies[0].hasPrefix("ERR bad-kind kind lorry is not configured"))
        #expect(replies[1].hasPrefix("ERR denied"))
        #expect(replies[2].hasPrefix("ERR bad-id"))
        #expect(replies[3].hasPrefix("ERR bad-request"))
        await connection.finish()
    }

    @Test func aReloadChangesTheKindsTheFastPathKnows() async throws {
        let connection = try ServedConnection()
        let engine = connection.status.engine
        #expect(try await connection.replies(to: "GET trip t-1\n").first?.hasPrefix("OK tok-t-1 ") == true)
        engine.reconfigure(providers: ["vehicle": InstantProvider()], policy: engine.policy, changedKinds: [])
        let replies = try await connection.replies(to: "GET trip t-1\nGET vehicle v-1\n")
        #expect(replies.first == "ERR bad-kind kind trip is not configured; configured: vehicle")
        #expect(replies.last?.hasPrefix("OK tok-v-1 ") == true, "an unchanged kind keeps its tokens")
        await connection.finish()
    }

    /// Through the public serving path (`SocketServingLoop`, what the benchmarks use).
    @Test func expiriesAreWrittenInDecimalWhateverTheirLength() async throws {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let far = Int64(SystemAgentClock().wallSeconds) + 86_400 * 365 * 1000
        engine.importTokens([CachedToken(kind: "vehicle", id: "far", token: "tok-far", expiresAt: far)], from: .memory)
        let status = AgentStatus(engine: engine, server: ServerStatistics())
        let serving = try SocketServingLoop(engine: engine, status: status, logger: Logger(label: "t"))
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        serving.serve(pair[0])
        let client = pair[1]
        defer { close(client) }
        let reply = try await offPool { () -> String in
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            _ = "GET vehicle far\n".withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while !received.contains(UInt8(ascii: "\n")) {
                let count = chunk.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                guard count > 0 else { break }
                received += chunk[..<count]
            }
            return String(decoding: received, as: UTF8.self)
        }
        #expect(reply == "OK tok-far \(far)\n")
        await serving.stop()
    }
}

@Suite("Token reply encoding")
struct TokenReplyEncodingTests {
    @Test func theEncodedReplyIsTheWireReplyLine() {
        // Every digit count, odd and even, with a zero pair inside, signed and not, and the extremes.
        var values: [Int64] = [Int64.max, Int64.min, Int64.min + 1, 1_800_000_000, 1_000_000_007, 100, 101, 10_000]
        var power: Int64 = 1
        for _ in 0..<18 {
            values += [power - 1, power, -power, -(power - 1), power + 9]
            power *= 10
        }
        for expiresAt in values {
            var buffer = ByteBuffer()
            RequestHandler.encodeToken(ServedToken(token: "tok-é.x", expiresAt: expiresAt), into: &buffer)
            RequestHandler.encodeToken(ServedToken(token: "t", expiresAt: expiresAt), into: &buffer)
            let expected =
                WireReply.token("tok-é.x", expiresAt: expiresAt).line + WireReply.token("t", expiresAt: expiresAt).line
            #expect(buffer.readString(length: buffer.readableBytes) == expected)
        }
    }
}
