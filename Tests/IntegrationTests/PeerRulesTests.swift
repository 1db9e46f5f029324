import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// System users and a group made for these tests (as root, like CI): one allowed vehicle tokens
/// by name, one allowed through a supplementary group, one allowed nothing.
enum TestUsers {
    static let allowed = "ftd-allowed"
    static let member = "ftd-member"
    static let other = "ftd-other"
    static let group = "ftd-vehicles"

    /// Whether the machine can run these tests: root, with useradd and runuser.
    static var available: Bool {
        getuid() == 0 && which("useradd") != nil && which("groupadd") != nil && which("runuser") != nil
            && which("socat") != nil
    }

    /// Creates the users and the group when missing.
    static func ensure() async throws {
        if getgrnam(group) == nil { try await run(which("groupadd")!, ["--system", group]) }
        for user in [allowed, member, other] where getpwnam(user) == nil {
            var arguments = ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
            if user == member { arguments += ["--groups", group] }
            let result = try await run(which("useradd")!, arguments + [user])
            guard result.status == 0 || getpwnam(user) != nil else {
                throw AgentError("useradd \(user) failed: \(result.stderr)")
            }
        }
    }

    /// Runs `socat` as `user`, sending `lines`, and returns the replies.
    static func socat(as user: String, socket: String, _ lines: String...) async throws -> [String] {
        let result = try await run(
            which("runuser")!,
            ["-u", user, "--", which("socat")!, "-t", "5", "-", "UNIX-CONNECT:\(socket)"],
            stdin: lines.map { $0 + "\n" }.joined()
        )
        return result.stdout.split(separator: "\n").map(String.init)
    }
}

@Suite("Peer rules with real users", .enabled(if: TestUsers.available, "needs root, useradd, runuser and socat"))
struct PeerRulesTests {
    private func writeConfig(_ json: String, to path: String) throws {
        try json.write(toFile: path, atomically: true, encoding: .utf8)
    }

    private func rules(allow users: [String], groups: [String] = [TestUsers.group]) -> String {
        let quoted = users.map { "\"\($0)\"" }.joined(separator: ", ")
        let quotedGroups = groups.map { "\"\($0)\"" }.joined(separator: ", ")
        return
            #"{"allow": {"vehicle": {"users": [\#(quoted)], "groups": [\#(quotedGroups)]}}, "admin": {"users": ["\#(TestUsers.allowed)"]}}"#
    }

    @Test func allowedUsersGetTokensOthersAreDeniedAndLogged() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-rules", suffix: ".json")
        try writeConfig(rules(allow: [TestUsers.allowed]), to: config)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, provider in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let allowed = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "GET vehicle p-1")
            let token = try #require(tokenOf(allowed.first), "\(allowed)")
            #expect(provider.issuedTokens.contains(token))
            let member = try await TestUsers.socat(as: TestUsers.member, socket: agent.socketPath, "GET vehicle p-1")
            #expect(tokenOf(member.first) == token, "a member of an allowed supplementary group gets it")
            let other = try await TestUsers.socat(
                as: TestUsers.other,
                socket: agent.socketPath,
                "GET vehicle p-1",
                "GET vehicle p-1",
                "GET trip p-1",
                "STATS"
            )
            #expect(other.count == 4)
            #expect(other.first == "ERR denied not allowed to ask for kind vehicle")
            #expect(other.dropFirst().first == "ERR denied not allowed to ask for kind vehicle")
            #expect(tokenOf(other.dropFirst(2).first) != nil, "trip has no rules")
            #expect(other.last == "ERR denied STATS is for the agent's admins")
            let adminStats = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "STATS")
            #expect(adminStats.first?.contains(" denied=3") == true, "\(adminStats)")
            let log = agent.log
            let uid = getpwnam(TestUsers.other)!.pointee.pw_uid
            let denials = log.split(separator: "\n").filter { $0.contains("request denied") }
            #expect(denials.count == 2, "logged once per peer and kind (vehicle, admin): \(denials)")
            #expect(denials.allSatisfy { $0.contains("peer_uid=\(uid)") && $0.contains("peer_process=socat") })
            #expect(!log.contains(token))
        }
    }

    @Test func warmIsCheckedAgainstTheKindsRulesLikeGet() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-rules", suffix: ".json")
        try writeConfig(rules(allow: [TestUsers.allowed]), to: config)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, provider in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let other = try await TestUsers.socat(
                as: TestUsers.other,
                socket: agent.socketPath,
                "WARM vehicle wp-1 wp-2",
                "WARM trip wp-3"
            )
            #expect(other == ["ERR denied not allowed to ask for kind vehicle", "OK queued=1 cached=0"])
            let allowed = try await TestUsers.socat(
                as: TestUsers.allowed,
                socket: agent.socketPath,
                "WARM vehicle wp-1"
            )
            #expect(allowed == ["OK queued=1 cached=0"])
            #expect(provider.requests(for: "wp-2") == 0, "nothing fetched for the denied WARM")
        }
    }

    @Test func aReloadAppliesNewRulesToOpenConnections() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-rules", suffix: ".json")
        try writeConfig(rules(allow: [TestUsers.allowed]), to: config)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, _ in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let session = try InteractiveSocat(user: TestUsers.allowed, socket: agent.socketPath)
            defer { session.stop() }
            #expect(tokenOf(try await session.exchange("GET vehicle live-1")) != nil)
            try writeConfig(rules(allow: [TestUsers.other], groups: []), to: config)
            kill(agent.pid, SIGHUP)
            #expect(await waitForReload(agent, count: 1))
            #expect(
                try await session.exchange("GET vehicle live-1") == "ERR denied not allowed to ask for kind vehicle"
            )
            let now = try await TestUsers.socat(as: TestUsers.other, socket: agent.socketPath, "GET vehicle live-1")
            #expect(tokenOf(now.first) != nil, "the newly allowed user gets it")
            // A name that does not resolve fails a reload, and the rules in force stay.
            try writeConfig(rules(allow: ["ftd-no-such-user"], groups: []), to: config)
            kill(agent.pid, SIGHUP)
            #expect(await waitForReload(agent, failures: 1))
            let still = try await TestUsers.socat(as: TestUsers.other, socket: agent.socketPath, "GET vehicle live-1")
            #expect(tokenOf(still.first) != nil)
            #expect(agent.log.contains("user ftd-no-such-user does not exist"))
        }
    }

    @Test func anUnknownNameAtStartIsAWarningAndMatchesNobody() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-rules", suffix: ".json")
        try writeConfig(rules(allow: ["ftd-not-yet-in-ldap", TestUsers.allowed], groups: []), to: config)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, _ in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            #expect(agent.log.contains("access rule matches nobody"))
            let allowed = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "GET vehicle w-1")
            #expect(tokenOf(allowed.first) != nil)
            let other = try await TestUsers.socat(as: TestUsers.other, socket: agent.socketPath, "GET vehicle w-1")
            #expect(other.first?.hasPrefix("ERR denied") == true)
        }
    }

    @Test func perUIDCapRefusesOneUsersExtraConnectionsOnly() async throws {
        try await TestUsers.ensure()
        try await withProviderAndAgent(["--max-connections-per-uid", "2", "--socket-mode", "0666"]) { agent, _ in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            var held: [RawSocket] = []
            for _ in 0..<2 {
                let socket = try RawSocket(path: agent.socketPath)
                #expect(try await socket.exchange("PING") == "PONG")
                held.append(socket)
            }
            let refused = try await SocketClient.exchange(agent.socketPath, "PING\n")
            #expect(refused == ["ERR busy too many connections for uid \(getuid())"])
            let otherUser = try await TestUsers.socat(as: TestUsers.other, socket: agent.socketPath, "PING")
            #expect(otherUser == ["PONG"], "another uid still gets in")
            held[0].close()
            var answered = false
            for _ in 0..<50 where !answered {
                // Until the agent has seen the close, it refuses (and closes) the new connection.
                answered = (try? await SocketClient.exchange(agent.socketPath, "PING\n", lines: 1)) == ["PONG"]
                if !answered { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(answered, "a closed connection frees its place")
            for socket in held { socket.close() }
        }
    }

    private func waitForReload(_ agent: AgentProcess, count: Int = 0, failures: Int = 0) async -> Bool {
        for _ in 0..<100 {
            if let stats = try? await agent.stats(),
                (stats["reloads"] ?? 0) >= count, (stats["reload_failures"] ?? 0) >= failures
            {
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}

/// `socat` run as another user with its standard input and output kept open: one connection
/// that outlives a reload.
final class InteractiveSocat: @unchecked Sendable {
    private let process = ChildProcess()
    private let input = Pipe()
    private let output = Pipe()

    init(user: String, socket: String) throws {
        process.executableURL = URL(fileURLWithPath: which("runuser")!)
        process.arguments = ["-u", user, "--", which("socat")!, "-", "UNIX-CONNECT:\(socket)"]
        process.standardInput = input
        process.standardOutput = output
        try process.run()
    }

    /// Writes `line` and reads one reply line (within 30 s: a hang detector, not a latency bound).
    func exchange(_ line: String) async throws -> String? {
        let input = input.fileHandleForWriting
        let descriptor = output.fileHandleForReading.fileDescriptor
        return try await offPool {
            try input.write(contentsOf: Data((line + "\n").utf8))
            return readLineBlocking(from: descriptor, timeoutMilliseconds: 30_000)
        }
    }

    /// Reads one reply line (within 30 s), to a request sent earlier.
    func readReply() async throws -> String? {
        let descriptor = output.fileHandleForReading.fileDescriptor
        return try await offPool { readLineBlocking(from: descriptor, timeoutMilliseconds: 30_000) }
    }

    /// Writes `lines`, each with its LF, without reading any reply.
    func send(_ lines: [String]) async throws {
        let input = input.fileHandleForWriting
        try await offPool { try input.write(contentsOf: Data(lines.map { $0 + "\n" }.joined().utf8)) }
    }

    /// Reads and drops every reply from now on, on a thread of its own: a client that reads what
    /// it is sent (the agent stops taking requests from one that does not).
    func discardReplies() {
        let descriptor = output.fileHandleForReading.fileDescriptor
        Thread.detachNewThread {
            var chunk = [UInt8](repeating: 0, count: 65536)
            while chunk.withUnsafeMutableBytes({ read(descriptor, $0.baseAddress, $0.count) }) > 0 {}
        }
    }

    /// Closes its input (socat then ends) and, should it still run, terminates it; never waits.
    func stop() {
        try? input.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
    }
}
