import Foundation
import TestSupport
import Testing

/// What `fleet-tokend get` and `status` print, through the real binary: messages a person can act
/// on (issue 34 §6).
@Suite("Command-line messages")
struct CommandMessagesTests {
    /// `get KIND ID 600` takes min-validity where the protocol's GET has it.
    @Test func getTakesMinValidityWhereTheProtocolHasIt() async throws {
        try await withProviderAndAgent { agent, provider in
            let positional = try await run(
                AgentProcess.binary,
                ["get", "vehicle", "v-1", "600", "--socket", agent.socketPath]
            )
            #expect(positional.status == 0, "\(positional.stderr)")
            #expect(!positional.stdout.isEmpty)
            #expect(provider.requests(for: "v-1") == 1)
            // More than the token's hour: still a token (the best available), as GET answers.
            let long = try await run(
                AgentProcess.binary,
                ["get", "vehicle", "v-1", "86400", "--socket", agent.socketPath]
            )
            #expect(long.status == 0, "\(long.stderr)")
            #expect(long.stdout == positional.stdout, "fetched moments ago: the same token")
            let both = try await run(
                AgentProcess.binary,
                ["get", "vehicle", "v-1", "600", "--min-validity", "300", "--socket", agent.socketPath]
            )
            #expect(both.status == 64, "\(both.stderr)")
            #expect(both.stderr.contains("Minimum validity given twice"), "\(both.stderr)")
            let same = try await run(
                AgentProcess.binary,
                ["get", "vehicle", "v-1", "600", "--min-validity", "600", "--socket", agent.socketPath]
            )
            #expect(same.status == 0, "\(same.stderr)")
        }
    }

    /// The socket's path is said once, and the id rule's backslash is not doubled.
    @Test func getSaysThePathOnceAndTheBackslashOnce() async throws {
        let path = TestTemporary.path("ftd-nope", suffix: ".sock")
        let unreachable = try await run(AgentProcess.binary, ["get", "vehicle", "v-1", "--socket", path])
        #expect(unreachable.status == 69)
        #expect(
            unreachable.stderr
                == "fleet-tokend: agent unreachable: connect: No such file or directory (socket \(path))\n"
        )
        let badID = try await run(AgentProcess.binary, ["get", "vehicle", "a\\b", "--socket", path])
        #expect(badID.status == 65)
        #expect(badID.stderr == "fleet-tokend: bad request: bad-id: id contains one of / : ? # or a backslash\n")
        let status = try await run(AgentProcess.binary, ["status", "--socket", path])
        #expect(status.status == 69)
        #expect(status.stderr.components(separatedBy: path).count == 2, "the path once: \(status.stderr)")
        #expect(status.stderr.contains("connect: No such file or directory"), "\(status.stderr)")
    }

    /// One entry is `1 entry`, and status does not count its own connection as a client.
    @Test func statusCountsInWordsAndLeavesItselfOut() async throws {
        try await withProviderAndAgent { agent, _ in
            _ = try await agent.send("GET vehicle v-1")
            // The GET's connection is closed by the time it is answered; the agent may count it
            // a moment longer.
            var report = (status: Int32(0), stdout: "", stderr: "")
            _ = try await eventually {
                report = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
                return report.stdout.contains("clients:   0 connected")
            }
            #expect(report.status == 0, "\(report.stderr)")
            let lines = report.stdout.split(separator: "\n").map(String.init)
            #expect(lines.contains { $0.hasPrefix("cache:     1 entry, hit ratio 0.0% (0 hits, 1 miss)") }, "\(lines)")
            #expect(
                lines.contains { $0.hasPrefix("  vehicle") && $0.hasSuffix("ok, 1 entry, 0 fetch errors") },
                "\(lines)"
            )
            #expect(lines.contains("clients:   0 connected besides this check, 0 requests denied"), "\(lines)")
            let json = try await run(AgentProcess.binary, ["status", "--json", "--socket", agent.socketPath])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            #expect(object["connections"] as? Int == 0, "\(json.stdout)")
        }
    }
}
