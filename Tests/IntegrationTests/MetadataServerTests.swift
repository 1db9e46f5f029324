import FakeGoogle
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The real agent's GCE metadata endpoint: Google's Python auth library in several processes
/// gets the entry's token through it with one `generateAccessToken` for all; the kernel names the
/// connecting user and only the entry's own rules decide (no exemption for root or the agent's
/// uid); the header rules; and a reload's default entry and rules.
@Suite("GCE metadata endpoint", .serialized)
struct MetadataServerTests {
    typealias Agent = AccessTokenAgent
    typealias Metadata = MetadataAgent

    static let entries =
        #""fleet-admin": \#(Agent.entry(Agent.admin)), "eta-viewer": \#(Agent.entry(Agent.viewer, extra: #", "lifetime": 1800"#))"#

    @Test func googleAuthInSeveralProcessesGetsTheEntrysTokenFromOneIAMCall() async throws {
        let python = try await Metadata.googleAuthPython()
        let fake = try await Agent.fake()
        let (agent, port) = try await Metadata.start(fake, entries: Self.entries)
        let processes = 4
        let outcomes = try await withThrowingTaskGroup(of: (status: Int32, stdout: String, stderr: String).self) {
            group in
            for _ in 0..<processes { group.addTask { try await Metadata.googleAuth(python, port: port) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let calls = fake.generateAccessTokenCalls
        #expect(calls.count == 1, "one generateAccessToken for \(processes) processes: \(calls)")
        let issued = try #require(calls.first?.issued)
        #expect(calls.first?.account == Agent.admin)
        // The project comes from the default entry's account (no project_id configured).
        let expected = "google.auth.compute_engine.credentials fake-project \(Agent.admin) \(issued)\n"
        for outcome in outcomes {
            #expect(outcome.status == 0, "\(outcome.stderr)")
            #expect(outcome.stdout == expected, "\(outcome.stderr)")
        }
        print("google-auth printed (\(processes) processes): \(outcomes.first?.stdout ?? "")", terminator: "")
        // The socket serves the same cached token.
        #expect(try await agent.send("GET access fleet-admin").first.flatMap(tokenOf) == issued)

        // Scopes within the entry's: the same token; a scope outside them: 403 naming it, no call.
        let scoped = try await Metadata.googleAuth(
            python,
            port: port,
            scopes: "https://www.googleapis.com/auth/cloud-platform"
        )
        #expect(scoped.status == 0 && scoped.stdout == expected, "\(scoped.stderr)")
        let refused = try await Metadata.googleAuth(
            python,
            port: port,
            scopes: "https://www.googleapis.com/auth/devstorage.full_control"
        )
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("403") && refused.stderr.contains("devstorage.full_control"))
        print("google-auth with a scope outside the entry: \(refused.stderr.split(separator: "\n").last ?? "")")
        #expect(fake.generateAccessTokenCalls.count == 1)
        _ = await agent.stop()
        #expect(!agent.log.contains(issued), "the token is never logged")
        await fake.stop()
    }

    @Test func theHeaderRulesAndUnknownPaths() async throws {
        let fake = try await Agent.fake()
        let (agent, port) = try await Metadata.start(fake, entries: Self.entries)
        let noFlavor = try await Metadata.get(port: port, Metadata.tokenPath, flavor: false)
        #expect(noFlavor.status == 403 && noFlavor.body.contains("Metadata-Flavor"), "\(noFlavor)")
        let forwarded = try await Metadata.get(port: port, Metadata.tokenPath, headers: ["X-Forwarded-For: 10.0.0.1"])
        #expect(forwarded.status == 403 && forwarded.body.contains("X-Forwarded-For"), "\(forwarded)")
        let rfc7239 = try await Metadata.get(port: port, Metadata.tokenPath, headers: ["Forwarded: for=10.0.0.1"])
        #expect(rfc7239.status == 403)
        let rebound = try await Metadata.get(port: port, Metadata.tokenPath, headers: ["Host: evil.example:\(port)"])
        #expect(rebound.status == 403 && rebound.body.contains("evil.example"))
        let unknown = try await Metadata.get(port: port, "/computeMetadata/v1/instance/zone")
        #expect(unknown.status == 404 && unknown.body == "404 Not Found: /computeMetadata/v1/instance/zone\n")
        #expect(fake.generateAccessTokenCalls.isEmpty, "no refusal fetched a token")
        let token = try await Metadata.get(port: port, Metadata.tokenPath)
        #expect(token.status == 200 && token.body.contains(#""token_type":"Bearer"}"#), "\(token)")
        _ = await agent.stop()
        await fake.stop()
    }

    /// The agent's own uid (and root, when the tests run as root) gets no exemption: only the
    /// entry's `allow` counts.
    @Test func theAgentsOwnUIDGetsOnlyWhatTheEntryAllows() async throws {
        let fake = try await Agent.fake()
        let entries =
            #""fleet-admin": {"service_account": "\#(Agent.admin)", "allow": {"users": [65534]}}"#
        let (agent, port) = try await Metadata.start(fake, entries: entries)
        let answer = try await Metadata.get(port: port, Metadata.tokenPath)
        #expect(answer.status == 403, "\(answer)")
        #expect(answer.body.contains("uid \(getuid()) is not allowed the token of fleet-admin"), "\(answer)")
        // The socket, whose rules exempt the agent's uid, still serves it.
        #expect(try await agent.send("GET access fleet-admin").first?.hasPrefix("OK ") == true)
        _ = await agent.stop()
        await fake.stop()
    }

    @Test(.enabled(if: TestUsers.available, "needs root, useradd and runuser"))
    func aUserWithoutTheEntrysRuleIsRefused() async throws {
        try await TestUsers.ensure()
        let fake = try await Agent.fake()
        // Users only: an entry the endpoint serves takes no `groups` (the endpoint cannot learn a
        // process's groups; MetadataHostileTests).
        let entries =
            #""fleet-admin": {"service_account": "\#(Agent.admin)", "allow": {"users": ["\#(TestUsers.allowed)"]}}"#
        let (agent, port) = try await Metadata.start(fake, entries: entries)
        let other = try await Metadata.get(port: port, Metadata.tokenPath, as: TestUsers.other)
        let otherUID = getpwnam(TestUsers.other)!.pointee.pw_uid
        #expect(other.status == 403, "\(other)")
        #expect(other.body.contains("uid \(otherUID) is not allowed the token of fleet-admin"), "\(other)")
        #expect(fake.generateAccessTokenCalls.isEmpty)
        let allowed = try await Metadata.get(port: port, Metadata.tokenPath, as: TestUsers.allowed)
        #expect(allowed.status == 200, "\(allowed)")
        // Root gets no exemption either.
        #expect(try await Metadata.get(port: port, Metadata.tokenPath).status == 403)
        #expect(fake.generateAccessTokenCalls.count == 1)
        _ = await agent.stop()
        await fake.stop()
    }

    @Test func aReloadChangesTheDefaultEntryAndTheRules() async throws {
        let fake = try await Agent.fake()
        let port = try Metadata.freePort()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let config = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: Metadata.key(port: port, defaultEntry: "fleet-admin")
        )
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        #expect(await eventually { agent.log.contains("serving the GCE metadata endpoint") })
        #expect(try await Metadata.get(port: port, Metadata.emailPath).body == Agent.admin)

        // The default becomes eta-viewer.
        _ = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: Metadata.key(port: port, defaultEntry: "eta-viewer", projectID: "fleet-prod")
        )
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 1))
        #expect(try await Metadata.get(port: port, Metadata.emailPath).body == Agent.viewer)
        #expect(try await Metadata.get(port: port, "/computeMetadata/v1/project/project-id").body == "fleet-prod")
        let viewerToken = try await Metadata.get(port: port, Metadata.tokenPath)
        #expect(viewerToken.status == 200)
        #expect(fake.generateAccessTokenCalls.map(\.account) == [Agent.viewer])

        // Its rules no longer name this uid: refused from the next request on.
        let closed =
            #""fleet-admin": \#(Agent.entry(Agent.admin)), "eta-viewer": {"service_account": "\#(Agent.viewer)", "lifetime": 1800, "allow": {"users": [65534]}}"#
        _ = try Agent.config(
            fake,
            directory: directory,
            entries: closed,
            extra: Metadata.key(port: port, defaultEntry: "eta-viewer", projectID: "fleet-prod")
        )
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 2))
        let refused = try await Metadata.get(port: port, Metadata.tokenPath)
        #expect(refused.status == 403, "\(refused)")
        #expect(refused.body.contains("not allowed the token of eta-viewer"))

        // A new listen address waits for a restart, and says so.
        _ = try Agent.config(
            fake,
            directory: directory,
            entries: closed,
            extra: Metadata.key(port: port &+ 1, defaultEntry: "eta-viewer", projectID: "fleet-prod")
        )
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 3))
        let stats = try await agent.send("STATS").first ?? ""
        #expect(stats.contains("restart:metadata_server"), "\(stats)")
        #expect(try await Metadata.get(port: port, Metadata.emailPath).status == 403, "still on the old port")
        _ = await agent.stop()
        await fake.stop()
    }

    @Test func checkConfigShowsTheEndpointAndRefusesABadDefault() async throws {
        let fake = try await Agent.fake()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let good = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: Metadata.key(port: 8989, defaultEntry: "fleet-admin")
        )
        let shown = try await run(AgentProcess.binary, ["check-config", "--config", good])
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(
            shown.stdout.contains(
                "metadata server: 127.0.0.1:8989 default fleet-admin, project from the default's account; "
                    + "serves eta-viewer,fleet-admin, each to its own allow only\n"
            ),
            "\(shown.stdout)"
        )
        let bad = try Agent.config(
            fake,
            directory: directory,
            entries: Self.entries,
            extra: Metadata.key(port: 8989, defaultEntry: "nobody")
        )
        let refused = try await run(AgentProcess.binary, ["check-config", "--config", bad])
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("metadata_server.default"), "\(refused.stderr)")
        await fake.stop()
    }
}
