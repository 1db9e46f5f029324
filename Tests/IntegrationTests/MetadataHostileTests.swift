import FakeGoogle
import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The real agent's GCE metadata endpoint against a hostile local user (issue 46): raw TCP
/// clients on loopback, on threads of their own. A refused user's connections dripping bodies
/// leave room for an allowed user's; a request not whole within `request_timeout` of its first
/// byte is closed; a flood of refusals is summarised in the log; pipelined requests are each
/// answered, in order; a uid a reload removes gets no token fetched before it; `groups` rules on
/// an entry the endpoint serves are refused.
@Suite("GCE metadata endpoint: hostile local users", .serialized)
struct MetadataHostileTests {
    typealias Agent = AccessTokenAgent
    typealias Metadata = MetadataAgent

    /// `fleet-admin`, allowed to `users` only.
    static func entries(users: String) -> String {
        #""fleet-admin": {"service_account": "\#(Agent.admin)", "allow": {"users": [\#(users)]}}"#
    }

    /// `metadata_server` on `port` with `request_timeout` when given.
    static func key(port: UInt16, requestTimeout: Double? = nil) -> String {
        let timeout = requestTimeout.map { #", "request_timeout": \#($0)"# } ?? ""
        return #", "metadata_server": {"listen": "127.0.0.1:\#(port)", "default": "fleet-admin"\#(timeout)}"#
    }

    /// An agent serving `entries` with the endpoint on a free port.
    static func start(_ fake: FakeGoogle, entries: String, requestTimeout: Double? = nil) async throws
        -> (agent: AgentProcess, port: UInt16)
    {
        let port = try Metadata.freePort()
        let agent = try await Agent.start(
            fake,
            entries: entries,
            extra: key(port: port, requestTimeout: requestTimeout)
        )
        let listening = await eventually { agent.log.contains("serving the GCE metadata endpoint") }
        try #require(listening, "the endpoint did not start:\n\(agent.log)")
        return (agent, port)
    }

    static func request(port: UInt16, _ path: String, extra: String = "") -> String {
        "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nMetadata-Flavor: Google\r\n\(extra)\r\n"
    }

    /// The answers in `bytes`, in order: each one's status and body (by its Content-Length).
    static func answers(_ bytes: [UInt8]) -> [(status: Int, body: String)] {
        var text = Substring(String(decoding: bytes, as: UTF8.self))
        var answers: [(status: Int, body: String)] = []
        while let end = text.range(of: "\r\n\r\n") {
            let head = text[..<end.lowerBound]
            let lines = head.split(separator: "\r\n")
            let status = lines.first.flatMap { $0.split(separator: " ").dropFirst().first }.flatMap { Int($0) } ?? 0
            let length =
                lines.dropFirst().first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            let bodyStart = end.upperBound
            let bodyEnd = text.index(bodyStart, offsetBy: length, limitedBy: text.endIndex) ?? text.endIndex
            answers.append((status, String(text[bodyStart..<bodyEnd])))
            text = text[bodyEnd...]
        }
        return answers
    }

    static var asAnotherUser: Bool { getuid() == 0 && which("setpriv") != nil && which("curl") != nil }

    /// A refused user's connections, each a whole head promising a 16,000-byte body and then one
    /// byte of it every `interval`; a connection the agent closes is opened again at the next
    /// round (every `interval`), so the user keeps every place it can. Runs
    /// on a thread of its own until ``stop``.
    final class BodyDrippers: Sendable {
        let stop = Atomic<Bool>(false)
        let reopened = Atomic<Int>(0)

        func run(port: UInt16, count: Int, path: String, interval: Duration) {
            let head = Array(MetadataHostileTests.request(port: port, path, extra: "Content-Length: 16000\r\n").utf8)
            func open() -> LoopbackSocket? {
                guard let socket = try? LoopbackSocket.connect(to: "127.0.0.1", port: port) else { return nil }
                socket.send(head)
                return socket
            }
            var sockets = (0..<count).map { _ in open() }
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !stop.load(ordering: .relaxed) {
                for index in sockets.indices {
                    guard let socket = sockets[index] else {
                        sockets[index] = open()
                        continue
                    }
                    var poller = pollfd(fd: socket.fd, events: Int16(POLLIN), revents: 0)
                    if poll(&poller, 1, 0) > 0 {
                        // Closed (or answered, which a whole request only is): open another.
                        _ = recv(socket.fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                        sockets[index] = open()
                        reopened.add(1, ordering: .relaxed)
                    } else {
                        socket.send([UInt8(ascii: "a")])
                    }
                }
                // The drip's pace: what the attacker sends, not a wait of the test's.
                Thread.sleep(
                    forTimeInterval: Double(interval.components.seconds) + Double(interval.components.attoseconds)
                        / 1e18
                )
            }
        }
    }

    /// GET `path` as uid and gid 65534 with curl: the status, 0 when no answer came.
    static func getAsNobody(port: UInt16, _ path: String) async throws -> Int {
        let result = try await run(
            which("setpriv")!,
            [
                "--reuid=65534", "--regid=65534", "--clear-groups", which("curl")!, "-sS", "--noproxy", "*",
                "--max-time", "60", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Metadata-Flavor: Google",
                "http://127.0.0.1:\(port)\(path)",
            ]
        )
        return result.status == 0 ? Int(result.stdout) ?? 0 : 0
    }

    /// Item 1: 64 connections of a user no entry allows, each dripping a body, once kept every
    /// new connection out (the allowed user got 0 of 10); a whole head no longer makes a
    /// connection one being answered, and a refused peer's connections make room first. The
    /// request deadline is at its longest here: the room comes from the ranking, not the time-out.
    @Test(.enabled(if: asAnotherUser, "needs root, setpriv and curl"))
    func aRefusedUsersDrippingBodiesLeaveRoomForAnAllowedUser() async throws {
        let fake = try await Agent.fake()
        // This process (root) is refused; uid 65534 is allowed.
        let (agent, port) = try await Self.start(fake, entries: Self.entries(users: "65534"), requestTimeout: 60)
        let drippers = BodyDrippers()
        let dripping = Task {
            try await offPool {
                drippers.run(port: port, count: 64, path: Metadata.tokenPath, interval: .milliseconds(20))
            }
        }
        let full = await eventually { ((try? await agent.stats())?["metadata_connections"] ?? 0) >= 64 }
        #expect(full, "the 64 dripping connections did not all open")
        var answered = 0
        for _ in 0..<10 {
            if try await Self.getAsNobody(port: port, Metadata.tokenPath) == 200 { answered += 1 }
        }
        drippers.stop.store(true, ordering: .relaxed)
        try await dripping.value
        #expect(answered >= 8, "the allowed user got \(answered) of 10 answers")
        let stats = try await agent.stats()
        #expect((stats["metadata_evicted"] ?? 0) >= 1, "\(stats)")
        print(
            "allowed user answered \(answered)/10 beside 64 dripping connections; dripping connections "
                + "reopened \(drippers.reopened.load(ordering: .relaxed)), metadata_evicted \(stats["metadata_evicted"] ?? 0)"
        )
        _ = await agent.stop()
        await fake.stop()
    }

    /// Item 1: a body trickled a byte at a time is closed at `request_timeout` from the request's
    /// first byte, though each byte restarts the idle time-out; counted as `request_timeout`.
    @Test func aRequestNotWholeWithinTheRequestTimeoutIsClosed() async throws {
        let fake = try await Agent.fake()
        let (agent, port) = try await Self.start(
            fake,
            entries: #""fleet-admin": \#(Agent.entry(Agent.admin))"#,
            requestTimeout: 0.5
        )
        let client = try LoopbackSocket.connect(to: "127.0.0.1", port: port)
        client.send(Array(Self.request(port: port, Metadata.tokenPath, extra: "Content-Length: 16000\r\n").utf8))
        let outcome = try await offPool { () -> (bytes: [UInt8], closed: Bool) in
            var received: [UInt8] = []
            // A byte every 50 ms until the agent closes the connection (a hang bound, not a wait).
            for _ in 0..<Int(hangLimit * 20) {
                let part = client.readUntilClosed(timeout: 0.05)
                received += part.bytes
                if part.closed || !client.send([UInt8(ascii: "a")]) { return (received, true) }
            }
            return (received, false)
        }
        #expect(outcome.closed)
        #expect(outcome.bytes.isEmpty, "\(String(decoding: outcome.bytes, as: UTF8.self))")
        let closedByDeadline = await eventually { ((try? await agent.stats())?["metadata_request_timeout"] ?? 0) == 1 }
        #expect(closedByDeadline)
        #expect(fake.generateAccessTokenCalls.isEmpty)
        _ = await agent.stop()
        await fake.stop()
    }

    /// Item 4: 3,000 refusals from one uid (30 kept-alive connections of 100 requests) once wrote
    /// 3,000 info lines; now at most 50, the summaries saying how many they left out.
    @Test func aFloodOfRefusalsIsSummarisedInTheLog() async throws {
        let fake = try await Agent.fake()
        let (agent, port) = try await Self.start(fake, entries: Self.entries(users: "65534"))
        let burst = Array(String(repeating: Self.request(port: port, Metadata.tokenPath), count: 100).utf8)
        let refused = try await withThrowingTaskGroup(of: Int.self) { group in
            for _ in 0..<30 {
                group.addTask {
                    let client = try LoopbackSocket.connect(to: "127.0.0.1", port: port)
                    client.send(burst)
                    // The 100th answer says `Connection: close`, and the agent closes.
                    let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
                    return Self.answers(outcome.bytes).filter { $0.status == 403 }.count
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(refused == 3000)
        #expect(try await agent.stats()["metadata_refused_rules"] == 3000)
        /// The refusal lines of uid 0, and how many the summaries left out.
        func counted() -> (lines: Int, leftOut: Int) {
            var lines = 0
            var leftOut = 0
            for line in agent.log.split(separator: "\n") where line.contains("uid=0") {
                if line.contains("metadata endpoint: request refused") { lines += 1 }
                if line.contains("metadata endpoint: refusals left out of the log") {
                    lines += 1
                    leftOut +=
                        line.split(separator: " ").first { $0.hasPrefix("left_out=") }
                        .flatMap { Int($0.dropFirst("left_out=".count)) } ?? 0
                }
            }
            return (lines, leftOut)
        }
        // The summary comes at the end of its interval: an event, waited for. Every refusal is
        // either a line of its own or counted in a summary.
        let summarised = await eventually(every: .milliseconds(100)) {
            counted().leftOut + Self.individualLines(agent.log) == 3000
        }
        let final = counted()
        #expect(summarised, "lines \(final.lines), left out \(final.leftOut)")
        #expect(final.lines <= 50, "\(final.lines) lines for 3,000 refusals")
        print("3,000 refusals: \(final.lines) log lines, \(final.leftOut) left out")
        _ = await agent.stop()
        await fake.stop()
    }

    /// The `request refused` lines of uid 0 in `log`.
    static func individualLines(_ log: String) -> Int {
        log.split(separator: "\n").filter { $0.contains("uid=0") && $0.contains("metadata endpoint: request refused") }
            .count
    }

    /// Item 5: two or three whole requests in one write were closed unanswered; each is
    /// answered now, in order.
    @Test func pipelinedRequestsAreEachAnsweredInOrder() async throws {
        let fake = try await Agent.fake()
        let (agent, port) = try await Self.start(fake, entries: #""fleet-admin": \#(Agent.entry(Agent.admin))"#)
        let client = try LoopbackSocket.connect(to: "127.0.0.1", port: port)
        client.send(
            Array(
                (Self.request(port: port, "/") + Self.request(port: port, Metadata.emailPath)
                    + Self.request(port: port, Metadata.tokenPath, extra: "Connection: close\r\n")).utf8
            )
        )
        let outcome = try await offPool { client.readUntilClosed(timeout: hangLimit) }
        let answers = Self.answers(outcome.bytes)
        #expect(answers.map(\.status) == [200, 200, 200], "\(String(decoding: outcome.bytes, as: UTF8.self))")
        #expect(answers.first?.body == "computeMetadata/\n")
        #expect(answers.dropFirst().first?.body == Agent.admin)
        #expect(answers.last?.body.contains(#""token_type":"Bearer"}"#) == true)
        #expect(try await agent.stats()["metadata_ok"] == 2)
        _ = await agent.stop()
        #expect(!agent.log.contains("ya29."), "the token is never logged")
        await fake.stop()
    }

    /// Item 2: a reload that removes the asking uid while its token is fetched: the token is not
    /// sent (the socket answers `ERR denied` there too).
    @Test func aUIDTheReloadRemovesMidFetchGetsNoToken() async throws {
        let fake = try await Agent.fake()
        let port = try Metadata.freePort()
        let directory = URL(fileURLWithPath: try TestTemporary.directory("ftd"))
        defer { TestTemporary.remove(directory.path) }
        let config = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries(users: "\(getuid())"),
            extra: Self.key(port: port)
        )
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        #expect(await eventually { agent.log.contains("serving the GCE metadata endpoint") })
        fake.holdIAM()
        let client = try LoopbackSocket.connect(to: "127.0.0.1", port: port)
        client.send(Array(Self.request(port: port, Metadata.tokenPath, extra: "Connection: close\r\n").utf8))
        let answer = Task { try await offPool { client.readUntilClosed(timeout: hangLimit) } }
        #expect(await eventually { fake.generateAccessTokenCalls.count == 1 })
        _ = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries(users: "65534"),
            extra: Self.key(port: port)
        )
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 1))
        fake.releaseIAM()
        let outcome = try await answer.value
        let answers = Self.answers(outcome.bytes)
        #expect(answers.map(\.status) == [403], "\(String(decoding: outcome.bytes, as: UTF8.self))")
        #expect(answers.first?.body.contains("uid \(getuid()) is no longer allowed the token of fleet-admin") == true)
        #expect(!String(decoding: outcome.bytes, as: UTF8.self).contains("ya29."))
        _ = await agent.stop()
        await fake.stop()
    }

    /// Item 10: the endpoint cannot learn a process's groups, so an entry it serves takes users
    /// only: `groups` there stops `serve` (78), `check-config` (78) and a reload, naming both.
    @Test func groupRulesOnAnEntryTheEndpointServesAreRefused() async throws {
        let fake = try await Agent.fake()
        let port = try Metadata.freePort()
        let directory = URL(fileURLWithPath: try TestTemporary.directory("ftd"))
        defer { TestTemporary.remove(directory.path) }
        let grouped =
            #""fleet-admin": {"service_account": "\#(Agent.admin)", "allow": {"users": [65534], "groups": [0]}}"#
        let config = try Agent.config(fake, directory: directory, entries: grouped, extra: Self.key(port: port))
        let expected =
            "access_tokens.fleet-admin.allow.groups: groups are not accepted on an entry the metadata endpoint"
        let socket = directory.appendingPathComponent("tokens.sock").path
        let environment = ProcessInfo.processInfo.environment.merging(Agent.environment(fake, directory: directory)) {
            $1
        }
        let served = try await run(
            "/usr/bin/timeout",
            ["60", AgentProcess.binary, "serve", "--config", config, "--socket", socket],
            environment: environment
        )
        #expect(served.status == 78, "\(served.stderr)")
        #expect(served.stderr.contains(expected), "\(served.stderr)")
        let checked = try await run(AgentProcess.binary, ["check-config", "--config", config])
        #expect(checked.status == 78 && checked.stderr.contains(expected), "\(checked.stderr)")

        // Without the endpoint, groups are the socket's, and accepted.
        _ = try Agent.config(fake, directory: directory, entries: grouped)
        #expect(try await run(AgentProcess.binary, ["check-config", "--config", config]).status == 0)

        // A reload to groups is refused; the rules in force stay.
        _ = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries(users: "65534"),
            extra: Self.key(port: port)
        )
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        _ = try Agent.config(fake, directory: directory, entries: grouped, extra: Self.key(port: port))
        kill(agent.pid, SIGHUP)
        #expect(await eventually { ((try? await agent.stats())?["reload_failures"] ?? 0) >= 1 })
        #expect(agent.log.contains(expected), "\(agent.log)")
        _ = await agent.stop()
        await fake.stop()
    }
}
