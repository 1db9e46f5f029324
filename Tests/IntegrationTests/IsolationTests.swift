import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// One kind's rules and reloads against real users: a kind is never served without the rules of
/// its own generation, and a token goes out only under the rules in force when it is written.
@Suite("Isolation with real users", .enabled(if: TestUsers.available, "needs root, useradd, runuser and socat"))
struct IsolationTests {
    private func write(_ json: String, to path: String) throws {
        try json.write(toFile: path, atomically: true, encoding: .utf8)
    }

    private func waitForReloads(_ agent: AgentProcess, _ count: Int) async -> Bool {
        for _ in 0..<400 {
            if let stats = try? await agent.stats(), (stats["reloads"] ?? 0) >= count { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    /// A config with `vehicle` open and, when `withNewKind`, kind `newk` allowed to `allowed` only.
    private func config(_ provider: FakeTokenProvider, withNewKind: Bool) -> String {
        let vehicle = #""vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}"#
        guard withNewKind else { return #"{"providers": {\#(vehicle)}}"# }
        return #"{"providers": {\#(vehicle), "newk": {"url": "\#(provider.url(kind: "newk"))"}},"#
            + #" "allow": {"newk": {"users": ["\#(TestUsers.allowed)"]}}}"#
    }

    @Test func aKindAddedByAReloadIsClosedUntilItsRulesAreInForce() async throws {
        try await TestUsers.ensure()
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let path = TestTemporary.path("ftd-isolation", suffix: ".json")
        try write(config(provider, withNewKind: false), to: path)
        let agent = try await AgentProcess(["--config", path, "--socket-mode", "0666"])
        defer { Task { await agent.stop() } }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
        let socat = which("socat")!
        // A denied user asks for `newk` as fast as the agent answers (100,000 requests pipelined
        // on one connection) while the kind comes and goes with its rule, a reload every 20 ms;
        // every reply is counted. Lower-case `get` takes the parser's path, which sees the
        // engine's kinds as soon as a reload installs them.
        let command =
            "yes 'get newk n-1' | head -n 100000 | runuser -u \(TestUsers.other) -- \(socat) -t 30 - UNIX-CONNECT:\(agent.socketPath)"
        let finished = Flag()
        let poll = Task {
            defer { finished.set() }
            return try await run("/bin/sh", ["-c", command])
        }
        var round = 0
        while !finished.isSet, round < 3000 {
            try write(config(provider, withNewKind: round % 2 == 0), to: path)
            kill(agent.pid, SIGHUP)
            round += 1
            try await Task.sleep(for: .milliseconds(20))
        }
        let replies = try await poll.value.stdout.split(separator: "\n")
        let tokens = replies.filter { $0.hasPrefix("OK ") }.count
        let denied = replies.filter { $0.hasPrefix("ERR denied") }.count
        let unknown = replies.filter { $0.hasPrefix("ERR bad-kind") }.count
        #expect(tokens == 0, "a denied user got \(tokens) tokens of \(replies.count) replies")
        #expect(
            denied > 0 && unknown > 0,
            "the kind came and went under the poll: \(denied) denied, \(unknown) unknown"
        )
        #expect(denied + unknown == replies.count, "\(Set(replies.map { $0.prefix(20) }))")
        #expect(replies.count == 100_000, "every request answered")
        #expect((try await agent.stats())["reloads"] ?? 0 >= 5, "reloads while the poll ran")
        let allowed = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "GET vehicle v-1")
        #expect(tokenOf(allowed.first) != nil)
        await agent.stop()
    }

    @Test func aTokenFetchedForAPeerRevokedMeanwhileIsNotHandedToIt() async throws {
        try await TestUsers.ensure()
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let path = TestTemporary.path("ftd-isolation", suffix: ".json")
        func rules(_ users: [String]) -> String {
            let list = users.map { "\"\($0)\"" }.joined(separator: ",")
            return #"{"providers": {"custom": {"url": "\#(provider.url(kind: "custom"))"}},"#
                + #" "allow": {"custom": {"users": [\#(list)]}}}"#
        }
        try write(rules([TestUsers.allowed, TestUsers.other]), to: path)
        let agent = try await AgentProcess(["--config", path, "--socket-mode", "0666"])
        defer { Task { await agent.stop() } }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
        let revoked = try InteractiveSocat(user: TestUsers.other, socket: agent.socketPath)
        defer { revoked.stop() }
        let kept = try InteractiveSocat(user: TestUsers.allowed, socket: agent.socketPath)
        defer { kept.stop() }
        // The provider answers in 3 s; the reload that revokes `other` lands well within that.
        async let revokedReply = revoked.exchange("GET custom delay3000-1")
        async let keptReply = kept.exchange("GET custom delay3000-1")
        while provider.requests(for: "delay3000-1") == 0 { try await Task.sleep(for: .milliseconds(10)) }
        try write(rules([TestUsers.allowed]), to: path)
        kill(agent.pid, SIGHUP)
        #expect(await waitForReloads(agent, 1))
        #expect(try await revokedReply == "ERR denied not allowed to ask for kind custom")
        #expect(tokenOf(try await keptReply) != nil, "the peer still allowed gets the token")
        #expect(provider.requests(for: "delay3000-1") == 1, "one fetch for both")
        await agent.stop()
    }

    @Test func aReportNeverEmptiesAKeyForOtherWorkers() async throws {
        try await TestUsers.ensure()
        // The guard between replacements of a refused token is longer than the test: the loop
        // below gets one replacement however slowly a loaded machine runs it.
        let config = TestTemporary.path("ftd-guard", suffix: ".json")
        try #"{"refetch_guard": 300}"#.write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await withProviderAndAgent(["--socket-mode", "0666", "--config", config]) { agent, provider in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let first = try await TestUsers.socat(
                as: TestUsers.allowed,
                socket: agent.socketPath,
                "GET vehicle shared-1"
            )
            let token = try #require(tokenOf(first.first))
            // The provider starts throttling: a worker reports the token refused.
            provider.script("shared-1", status: .tooManyRequests, headers: [("Retry-After", "300")], body: [])
            let report = try await TestUsers.socat(
                as: TestUsers.other,
                socket: agent.socketPath,
                "REFRESH vehicle shared-1 \(token)",
                "REFRESH vehicle shared-1 \(token)"
            )
            #expect(report.first == "ERR unavailable HTTP 429; retry after 300 s", "the reporter is told")
            // Pipelined, the second report joins the first one's fetch, and shares its answer.
            #expect(report.last == report.first, "\(report)")
            let later = try await TestUsers.socat(
                as: TestUsers.other,
                socket: agent.socketPath,
                "REFRESH vehicle shared-1 \(token)"
            )
            #expect(later.first?.hasPrefix("ERR unavailable provider failing; next try in") == true, "\(later)")
            let others = try await TestUsers.socat(
                as: TestUsers.allowed,
                socket: agent.socketPath,
                "GET vehicle shared-1"
            )
            #expect(tokenOf(others.first) == token, "every other worker still gets the token")
            #expect(provider.requests(for: "shared-1") == 2, "one fetch for the report, none while throttled")

            // GET, then REFRESH with the token just got, in a loop: one replacement per
            // `refetch_guard`, so one in all.
            let session = try InteractiveSocat(user: TestUsers.other, socket: agent.socketPath)
            defer { session.stop() }
            var refused = 0
            for _ in 0..<25 {
                let current = try #require(tokenOf(try await session.exchange("GET vehicle loop-1")))
                let reply = try await session.exchange("REFRESH vehicle loop-1 \(current)") ?? ""
                #expect(tokenOf(reply) != current, "never the reported token back")
                if reply.hasPrefix("ERR unavailable a replacement for the refused token") { refused += 1 }
            }
            #expect(provider.requests(for: "loop-1") == 2, "\(provider.requests(for: "loop-1")) fetches")
            #expect(refused == 24, "every report after the first within the guard")
        }
    }

    @Test func aFloodedKindNeitherStarvesAnotherNorOutlivesItsFlooder() async throws {
        try await TestUsers.ensure()
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let path = TestTemporary.path("ftd-flood", suffix: ".json")
        try write(
            #"{"providers": {"custom": {"url": "\#(provider.url(kind: "custom"))", "timeout": 300}, "vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}},"#
                + #" "max_concurrent_fetches": 2, "max_queued_fetches": 500, "max_queued_fetches_per_uid": 300}"#,
            to: path
        )
        let agent = try await AgentProcess(["--config", path, "--socket-mode", "0666"])
        defer { Task { await agent.stop() } }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
        // One uid floods `custom`, whose provider answers in 10 minutes (its time-out is 5): no
        // fetch ends while the test runs, so 303 new ids pipelined on three connections it keeps
        // open fill its uid's bound of 300 first fetches and keep it full.
        let flooders = try (0..<3).map { _ in try InteractiveSocat(user: TestUsers.other, socket: agent.socketPath) }
        defer { for flooder in flooders { flooder.stop() } }
        for (index, flooder) in flooders.enumerated() {
            try await flooder.send((0..<101).map { "GET custom delay600000-\(index * 101 + $0)" })
        }
        let queued = await eventually(every: .milliseconds(50)) {
            ((try? await agent.stats())?["inflight"] ?? 0) >= 300
        }
        #expect(queued, "the flood is queued, up to its uid's bound")
        // A fourth connection asks for 100 more: each is refused at once (its replies owe nothing
        // to the queued fetches), and none is queued.
        let late = try InteractiveSocat(user: TestUsers.other, socket: agent.socketPath)
        defer { late.stop() }
        try await late.send((303..<403).map { "GET custom delay600000-\($0)" })
        var busy = 0
        for _ in 0..<100 {
            guard let reply = try await late.readReply() else { break }
            if reply.hasPrefix("ERR busy") { busy += 1 }
        }
        #expect(busy == 100, "past its uid's bound every first fetch is refused: \(busy)")
        let inflight = (try? await agent.stats())?["inflight"] ?? 0
        #expect(inflight <= 302, "one uid queues at most 300 first fetches: \(inflight)")
        // Another uid's vehicle fetch has a lane of its own: answered while the flood still waits.
        let vehicle = try await TestUsers.socat(as: TestUsers.allowed, socket: agent.socketPath, "GET vehicle fresh-A")
        #expect(tokenOf(vehicle.first) != nil, "\(vehicle)")
        let behind = (try? await agent.stats())?["inflight"] ?? 0
        #expect(behind >= 300, "answered while the flood waits: \(behind) fetches")
        #expect(provider.requests(for: "fresh-A") == 1)
        // The flooder leaves: its queued fetches are dropped (none could have run: the two at the
        // provider hold the kind's lane), and only those two are left.
        for flooder in flooders { flooder.stop() }
        late.stop()
        let drained = await eventually(every: .milliseconds(50)) {
            ((try? await agent.stats())?["inflight"] ?? .max) <= 2
        }
        #expect(drained, "only the fetches at the provider are left")
        let reached = (0..<403).reduce(0) { $0 + provider.requests(for: "delay600000-\($1)") }
        #expect(reached <= 2, "\(reached) of the flood's fetches reached the provider")
        await agent.stop()
    }

    @Test func aUIDFloodingOneKindDoesNotEvictAnotherKindsTokens() async throws {
        try await TestUsers.ensure()
        let path = TestTemporary.path("ftd-evict", suffix: ".json")
        try write(
            #"{"demo": true, "max_entries": 200, "allow": {"trip": {"users": ["\#(TestUsers.other)"]}}}"#,
            to: path
        )
        // The demo issuer: every fetch mints a new token, so an equal token was not fetched again.
        let agent = try await AgentProcess(["--config", path, "--socket-mode", "0666"])
        defer { Task { await agent.stop() } }
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
        let vehicle = try #require(tokenOf(try await agent.send("GET vehicle v-1").first))
        let flood = try InteractiveSocat(user: TestUsers.other, socket: agent.socketPath)
        defer { flood.stop() }
        flood.discardReplies()
        try await flood.send((0..<1000).map { "GET trip t-\($0)" })
        _ = await eventually(within: 300, every: .milliseconds(50)) {
            ((try? await agent.stats())?["fetches"] ?? 0) >= 1001
        }
        let stats = try await agent.stats()
        #expect((stats["fetches"] ?? 0) >= 1001, "the flood was fetched: \(stats)")
        #expect((stats["entries"] ?? 0) <= 200)
        #expect(try await agent.send("GET vehicle v-1").first.flatMap(tokenOf) == vehicle, "still cached")
        #expect(try await agent.send("INFO vehicle v-1").first?.hasPrefix("OK cached=yes") == true)
        await agent.stop()
    }
}

/// A flag a background task raises when it ends.
private final class Flag: Sendable {
    private let raised = Atomic<Bool>(false)
    func set() { raised.store(true, ordering: .relaxed) }
    var isSet: Bool { raised.load(ordering: .relaxed) }
}
