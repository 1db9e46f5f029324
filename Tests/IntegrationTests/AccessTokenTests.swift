import FakeGoogle
import FleetTokenClient
import Foundation
import Systemd
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Access tokens served by the real agent from a fake Google: one per entry, one
/// `generateAccessToken` per entry per lifetime however many ask, refreshed ahead, through the
/// socket, shared memory, the client library and `fleet-tokend get`, and handed over at a restart.
@Suite("Access tokens", .serialized)
struct AccessTokenTests {
    typealias Agent = AccessTokenAgent

    static let entries =
        #""fleet-admin": \#(Agent.entry(Agent.admin)), "eta-viewer": \#(Agent.entry(Agent.viewer, extra: #", "lifetime": 1800"#))"#

    @Test func eachEntryHasItsTokenAndFiftyCallersCauseOneCallPerEntry() async throws {
        let fake = try await Agent.fake()
        let agent = try await Agent.start(fake, entries: Self.entries)
        // Every IAM answer is held until all fifty callers of each entry wait on the one call.
        fake.holdIAM()
        let started = Date().timeIntervalSince1970
        let admins = (0..<50).map { _ in Task { try await agent.send("GET access fleet-admin").first } }
        let viewers = (0..<50).map { _ in Task { try await agent.send("GET access eta-viewer").first } }
        let waiting = await eventually {
            guard fake.generateAccessTokenCalls.count == 2 else { return false }
            return ((try? await agent.stats())?["misses"] ?? 0) >= 100
        }
        #expect(waiting, "\(fake.generateAccessTokenCalls.count) calls, all 100 GETs waiting on them")
        fake.releaseIAM()
        var replies: [String: Set<String>] = [:]
        for (name, tasks) in [("fleet-admin", admins), ("eta-viewer", viewers)] {
            for task in tasks { replies[name, default: []].insert(try await task.value ?? "none") }
        }
        #expect(replies.values.allSatisfy { $0.count == 1 }, "one answer per entry: \(replies)")
        let calls = fake.generateAccessTokenCalls
        #expect(calls.count == 2)
        for (name, account, lifetime) in [("fleet-admin", Agent.admin, 3600), ("eta-viewer", Agent.viewer, 1800)] {
            let reply = try #require(Agent.token(replies[name]?.first))
            let call = try #require(calls.first { $0.account == account })
            #expect(reply.token == call.issued, "\(name): the token IAM issued for \(account)")
            #expect(call.scopes == ["https://www.googleapis.com/auth/cloud-platform"])
            #expect(call.lifetime == "\(lifetime)s")
            #expect(abs(Double(reply.expiresAt) - (started + Double(lifetime))) < 60)
        }
        let admin = try #require(Agent.token(replies["fleet-admin"]?.first)).token
        // Cached: the same token, no call; every key-per-kind count is per entry.
        #expect(try await agent.send("GET access fleet-admin 600").first.flatMap(tokenOf) == admin)
        let stats = try await agent.stats()
        #expect(stats["signs_access:fleet-admin"] == 1 && stats["signs_access:eta-viewer"] == 1, "\(stats)")
        #expect(stats["shm_segments"] == 2, "a segment per entry")
        #expect(
            try await agent.send("GET access nobody").first
                == "ERR bad-kind access token nobody is not configured; configured: eta-viewer,fleet-admin"
        )
        #expect(
            try await agent.send("GET vehicle v-1").first
                == "ERR bad-kind kind vehicle is not configured; configured: access"
        )
        #expect(
            try await agent.send("GET access Fleet-Admin").first?.hasPrefix("ERR bad-kind access token name must be")
                == true
        )

        // The client library, from its shared-memory segment (then without a round trip), and the CLI.
        let client = FleetTokenClient(socketPath: agent.socketPath)
        #expect(try await client.accessToken("fleet-admin").jwt == admin)
        #expect(try await client.token(.accessToken("fleet-admin"), minimumValidity: 0).jwt == admin)
        #expect(client.sharedMemoryReads >= 1, "read from the entry's segment")
        let cli = try await run(AgentProcess.binary, ["get", "--socket", agent.socketPath, "access", "fleet-admin"])
        #expect(cli.status == 0 && cli.stdout == admin + "\n", "the bare token: \(cli.stderr)")
        let bad = try await run(AgentProcess.binary, ["get", "--socket", agent.socketPath, "access", "nobody"])
        #expect(bad.status == 65 && bad.stdout.isEmpty)
        #expect(fake.generateAccessTokenCalls.count == 2)

        // INFO tells its fingerprint, never the token; the log holds neither token.
        let info = try #require(try await agent.send("INFO access fleet-admin").first)
        #expect(info.hasPrefix("OK cached=yes token=yes fingerprint=") && !info.contains(admin))
        let log = agent.log
        for call in fake.generateAccessTokenCalls { #expect(!log.contains(call.issued ?? "-"), "a token in the log") }
        for token in fake.issuedAccessTokens { #expect(!log.contains(token.value)) }
        await agent.stop()
        await fake.stop()
    }

    @Test func aTokenIsRefreshedAheadWithoutAnyoneAsking() async throws {
        let fake = try await Agent.fake()
        // Tokens of 305 s: served while 300 s are left, so refreshed 5 s after each fetch (less
        // its jitter), before a GET ever finds it under the floor.
        fake.capImpersonatedLifetime(seconds: 305)
        let agent = try await Agent.start(fake, entries: Self.entries)
        let first = try #require(Agent.token(try await agent.send("GET access fleet-admin").first))
        let refreshed = await eventually {
            fake.generateAccessTokenCalls.count(where: { $0.account == Agent.admin }) >= 2
        }
        #expect(refreshed, "refreshed ahead, with no GET")
        let reply = try #require(Agent.token(try await agent.send("GET access fleet-admin 0").first))
        #expect(reply.token != first.token)
        let issued = fake.generateAccessTokenCalls.filter { $0.account == Agent.admin }.compactMap(\.issued)
        #expect(issued.dropFirst().contains(reply.token))
        #expect(reply.expiresAt - Int(Date().timeIntervalSince1970) >= 299, "never under the 300 s floor")
        let stats = try await agent.stats()
        #expect((stats["refreshes"] ?? 0) >= 1)
        await agent.stop()
        await fake.stop()
    }

    @Test func refreshReplacingARefusedTokenCausesOneCall() async throws {
        let fake = try await Agent.fake()
        let agent = try await Agent.start(fake, entries: Self.entries)
        let client = FleetTokenClient(socketPath: agent.socketPath)
        let refused = try await client.accessToken("fleet-admin")
        let replacements = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<20 {
                group.addTask { try await client.refresh(.accessToken("fleet-admin"), replacing: refused).jwt }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(replacements.count == 1 && !replacements.contains(refused.jwt))
        #expect(fake.generateAccessTokenCalls.count == 2, "the first token and one replacement")
        #expect(try await agent.send("GET access fleet-admin").first.flatMap(tokenOf) == replacements.first)
        await agent.stop()
        await fake.stop()
    }

    @Test func accessTokensPassThroughTheFdStoreAtARestart() async throws {
        let fake = try await Agent.fake()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let notify = try NotifyListener(directory: directory)
        let socketPath = directory.appendingPathComponent("tokens.sock").path
        let environment = ["NOTIFY_SOCKET": notify.path]
        let config = try Agent.config(fake, directory: directory, entries: Self.entries)
        let arguments = ["--config", config]
        let fakeEnvironment = Agent.environment(fake, directory: directory).merging(environment) { $1 }
        let agent = try await AgentProcess(arguments, socketPath: socketPath, environment: fakeEnvironment)
        let token = try #require(tokenOf(try await agent.send("GET access fleet-admin").first))
        kill(agent.pid, SIGTERM)
        let stored = try #require(try await notify.waitFor(timeout: 10) { $0.fields["FDSTORE"] == "1" })
        let cacheFD = try #require(stored.descriptors.first)
        defer { close(cacheFD) }
        #expect(SealedMemoryFile.isSealed(cacheFD), "a sealed memory file, never on disk")
        let snapshot = String(decoding: try SealedMemoryFile.read(cacheFD), as: UTF8.self)
        #expect(snapshot.contains("access:fleet-admin\tfleet-admin\t"))
        #expect(await agent.stop() == 0)

        let next = try await AgentProcess(
            arguments,
            socketPath: socketPath,
            environment: fakeEnvironment,
            launcher: [
                "/bin/sh", "-c",
                "exec 3</proc/\(getpid())/fd/\(cacheFD); LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=cache exec \"$0\" \"$@\"",
            ]
        )
        #expect(try await next.send("GET access fleet-admin").first.flatMap(tokenOf) == token, "handed over")
        #expect(fake.generateAccessTokenCalls.count == 1, "no new IAM call")
        #expect(!next.log.contains(token))
        await next.stop()
        await fake.stop()
    }
}
