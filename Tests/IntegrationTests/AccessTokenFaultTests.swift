import FakeGoogle
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Access tokens when things go wrong or change: each IAM fault as the real agent answers it,
/// rules per entry (and per entry's segment) with real users, and a reload that changes an
/// entry's scopes or account.
@Suite("Access tokens: faults, rules, reloads", .serialized)
struct AccessTokenFaultTests {
    typealias Agent = AccessTokenAgent

    @Test func eachFaultIsAnsweredAsForSignJwtAndTheOperatorsNamesTheFix() async throws {
        let fake = try await Agent.fake()
        let entries =
            #""ops": \#(Agent.entry(Agent.other)), "fleet-admin": \#(Agent.entry(Agent.admin)), "eta-viewer": \#(Agent.entry(Agent.viewer))"#
        let agent = try await Agent.start(fake, entries: entries, arguments: ["--degraded-after", "600"])
        /// The reply to `GET access ops` with `fault` injected once, then the entry forgotten
        /// (its back-off with it).
        func once(_ fault: FakeGoogleFault) async throws -> String {
            fake.inject(fault, into: .generateAccessToken, account: Agent.other)
            let reply = try await agent.send("GET access ops").first ?? "none"
            // After the reply: a DROP read while the fetch runs would leave its failure recorded.
            #expect(try await agent.send("DROP access ops") == ["OK"])
            return reply
        }
        #expect(try await once(.serverError(status: 503)) == "ERR unavailable IAM generateAccessToken HTTP 503")
        #expect(
            try await once(.tooManyRequests(retryAfterSeconds: 17))
                == "ERR unavailable IAM generateAccessToken HTTP 429; retry after 17 s"
        )
        let late = #"{"accessToken":"ya29.late","expireTime":"2099-01-01T00:00:00Z"}"#
        let tooLate = try await once(.raw(status: 200, body: Array(late.utf8)))
        #expect(tooLate.hasPrefix("ERR unavailable IAM generateAccessToken reply's expireTime is "), "\(tooLate)")
        #expect(tooLate.hasSuffix("past the 3600 s asked for"))
        let spaced = #"{"accessToken":"ya29 spaced","expireTime":"2026-01-01T00:00:00Z"}"#
        #expect(try await once(.raw(status: 200, body: Array(spaced.utf8))).contains("not printable ASCII"))
        // A 401 once: a fresh host token, one more try, and the token.
        #expect(tokenOf(try await once(.unauthorized)) != nil)
        #expect(fake.generateAccessTokenCalls.suffix(2).map(\.status) == [401, 200])

        // The operator's faults, held without calling IAM again; other entries are untouched.
        fake.inject(.permissionDenied(.iamPermissionDenied), into: .generateAccessToken, account: Agent.admin)
        let denied = try #require(try await agent.send("GET access fleet-admin").first)
        #expect(
            denied.hasPrefix(
                "ERR unavailable IAM generateAccessToken for \(Agent.admin): HTTP 403 IAM_PERMISSION_DENIED"
            )
        )
        #expect(denied.contains("grant the host's identity roles/iam.serviceAccountTokenCreator on \(Agent.admin)"))
        #expect(denied.hasSuffix("retry after 30 s"))
        fake.inject(.permissionDenied(.serviceDisabled), into: .generateAccessToken, account: Agent.viewer)
        let disabled = try #require(try await agent.send("GET access eta-viewer").first)
        #expect(disabled.contains("SERVICE_DISABLED; enable iamcredentials.googleapis.com"), "\(disabled)")
        fake.removeAccount(Agent.other)
        let missing = try #require(try await agent.send("GET access ops").first)
        #expect(missing.contains("HTTP 404"))
        #expect(missing.contains("no such service account \(Agent.other): check access_tokens' service_account"))
        let calls = fake.generateAccessTokenCalls.count
        #expect(
            try await agent.send("DROP access fleet-admin", "GET access fleet-admin").last?.hasPrefix(
                "ERR unavailable IAM generateAccessToken for \(Agent.admin): HTTP 403"
            ) == true
        )
        #expect(fake.generateAccessTokenCalls.count == calls, "held off without calling IAM")
        let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(status.status == 1, "degraded at once: \(status.stdout)")
        #expect(
            status.stdout.contains("access:fleet-admin: signer or credentials need the operator"),
            "\(status.stdout)"
        )
        #expect(agent.log.contains("access token impersonation needs the operator"))
        for token in fake.issuedAccessTokens { #expect(!agent.log.contains(token.value)) }
        await agent.stop()
        await fake.stop()
    }

    @Test func aSilentIAMFailsTheFetchWithinItsTimeOutAndTheNextCallWorks() async throws {
        let fake = try await Agent.fake()
        let agent = try await Agent.start(fake, entries: #""ops": \#(Agent.entry(Agent.other))"#)
        fake.inject(.hang, into: .generateAccessToken, account: Agent.other)
        let started = ContinuousClock.now
        let reply = try #require(try await agent.send("GET access ops").first)
        #expect(reply.hasPrefix("ERR unavailable IAM generateAccessToken request failed"), "\(reply)")
        #expect(ContinuousClock.now - started < .seconds(20), "ended by the call's 10 s time-out")
        #expect(try await agent.send("DROP access ops") == ["OK"])
        #expect(tokenOf(try await agent.send("GET access ops").first) == fake.generateAccessTokenCalls.last?.issued)
        await agent.stop()
        await fake.stop()
    }

    @Test func aReloadThatChangesAnEntrysScopesOrAccountReplacesItsTokenOnly() async throws {
        let fake = try await Agent.fake()
        let directory = try AgentProcess.makeTemporaryDirectory()
        func write(_ admin: String) throws -> String {
            try Agent.config(
                fake,
                directory: directory,
                entries: #""fleet-admin": \#(admin), "eta-viewer": \#(Agent.entry(Agent.viewer))"#
            )
        }
        let config = try write(Agent.entry(Agent.admin))
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        let first = try #require(tokenOf(try await agent.send("GET access fleet-admin").first))
        let viewer = try #require(tokenOf(try await agent.send("GET access eta-viewer").first))

        _ = try write(
            Agent.entry(
                Agent.admin,
                extra: #", "scopes": ["https://www.googleapis.com/auth/cloud-platform", "openid"]"#
            )
        )
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 1))
        let rescoped = try #require(tokenOf(try await agent.send("GET access fleet-admin").first))
        #expect(rescoped != first)
        #expect(
            fake.generateAccessTokenCalls.last?.scopes == ["https://www.googleapis.com/auth/cloud-platform", "openid"]
        )
        let stats = try #require(try await agent.send("STATS").first)
        #expect(stats.contains(" reload_changes=provider:access:fleet-admin "), "\(stats)")

        _ = try write(Agent.entry(Agent.other))
        kill(agent.pid, SIGHUP)
        #expect(await Agent.reloaded(agent, count: 2))
        let other = try #require(tokenOf(try await agent.send("GET access fleet-admin").first))
        #expect(fake.generateAccessTokenCalls.last?.account == Agent.other)
        #expect(fake.generateAccessTokenCalls.last?.issued == other)
        #expect(
            tokenOf(try await agent.send("GET access eta-viewer").first) == viewer,
            "the unchanged entry keeps its token"
        )
        #expect(fake.generateAccessTokenCalls.count(where: { $0.account == Agent.viewer }) == 1)
        await agent.stop()
        await fake.stop()
    }

    @Test func theHostsOwnTokenNeedsItsOptInAndIsWarnedAboutNamingWhatItCanSignFor() async throws {
        let fake = try await Agent.fake()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let entries =
            #""host": {"source": "host", "allow": {"users": [\#(getuid())]}}, "fleet-admin": \#(Agent.entry(Agent.admin))"#
        let environment = ProcessInfo.processInfo.environment.merging(Agent.environment(fake, directory: directory)) {
            $1
        }
        let refused = try Agent.config(fake, directory: directory, entries: entries)
        let socket = directory.appendingPathComponent("refused.sock").path
        let start = try await run(
            AgentProcess.binary,
            ["serve", "--config", refused, "--socket", socket],
            environment: environment
        )
        #expect(start.status == 78)
        #expect(start.stderr.contains("access_tokens.host.source"), "\(start.stderr)")

        let config = try Agent.config(
            fake,
            directory: directory,
            entries: entries,
            extra: #", "allow_host_identity": true"#
        )
        let check = try await run(AgentProcess.binary, ["check-config", "--config", config], environment: environment)
        #expect(check.status == 0, "\(check.stderr)")
        #expect(check.stdout.contains("  access host "), "\(check.stdout)")
        #expect(check.stdout.contains("  access fleet-admin "))
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        let token = try #require(tokenOf(try await agent.send("GET access host").first))
        #expect(fake.issuedAccessTokens.first { $0.value == token }?.issuer == .metadata, "the host's own token")
        #expect(fake.generateAccessTokenCalls.isEmpty)
        let log = agent.log
        #expect(log.contains("access token serves the host's own identity"), "\(log)")
        #expect(log.contains("signs_for=\(Agent.admin)"))
        #expect(!log.contains(token))
        await agent.stop()
        await fake.stop()
    }

    @Test(.enabled(if: TestUsers.available, "needs root, useradd, runuser and socat"))
    func eachEntryIsGrantedByItsOwnRulesAndSoIsItsSegment() async throws {
        try await TestUsers.ensure()
        let fake = try await Agent.fake()
        let entries =
            #""fleet-admin": {"service_account": "\#(Agent.admin)", "allow": {"users": ["\#(TestUsers.allowed)"]}},"#
            + #" "eta-viewer": {"service_account": "\#(Agent.viewer)", "allow": {"groups": ["\#(TestUsers.group)"]}}"#
        let agent = try await Agent.start(fake, entries: entries, arguments: ["--socket-mode", "0666"])
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
        func ask(_ user: String, _ lines: String...) async throws -> [String] {
            try await run(
                which("runuser")!,
                ["-u", user, "--", which("socat")!, "-t", "5", "-", "UNIX-CONNECT:\(agent.socketPath)"],
                stdin: lines.map { $0 + "\n" }.joined()
            ).stdout.split(separator: "\n").map(String.init)
        }
        let allowed = try await ask(
            TestUsers.allowed,
            "GET access fleet-admin",
            "GET access eta-viewer",
            "SHM access eta-viewer 2"
        )
        #expect(tokenOf(allowed.first) != nil, "\(allowed)")
        #expect(allowed.dropFirst().first == "ERR denied not allowed to ask for access token eta-viewer")
        #expect(
            allowed.last == "ERR denied not allowed to ask for access token eta-viewer",
            "its segment is never sent"
        )
        let member = try await ask(
            TestUsers.member,
            "GET access eta-viewer",
            "GET access fleet-admin",
            "SHM access fleet-admin 2",
            "SHM access eta-viewer 2"
        )
        #expect(tokenOf(member.first) != nil, "\(member)")
        #expect(member.dropFirst().first == "ERR denied not allowed to ask for access token fleet-admin")
        #expect(member.dropFirst(2).first == "ERR denied not allowed to ask for access token fleet-admin")
        #expect(member.last?.hasPrefix("OK size=") == true, "its own entry's segment: \(member)")
        let other = try await ask(TestUsers.other, "GET access fleet-admin", "GET access eta-viewer")
        #expect(other.allSatisfy { $0.hasPrefix("ERR denied") }, "\(other)")
        #expect(fake.generateAccessTokenCalls.count == 2)
        await agent.stop()
        await fake.stop()
    }
}
