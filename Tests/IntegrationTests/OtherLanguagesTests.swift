import FakeGoogle
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's "From other languages", its Python examples against a real agent:
/// `fleet_tokend_client.py` (standard library only) on the demo issuer, where one connection
/// carries its batches, a batch's requests are written at once and their replies come in order,
/// and when the agent restarts on the same socket the client connects again and sends what was
/// not answered; and `metadata_access_token.py` (Google's google-auth) on the GCE metadata
/// endpoint.
@Suite("Other languages")
struct OtherLanguagesTests {
    static let pythonExample = "Examples/other-languages/python/fleet_tokend_client.py"
    static let pythonMetadataExample = "Examples/other-languages/python/metadata_access_token.py"

    @Test func thePythonExamplePipelinesAndReconnectsAcrossARestart() async throws {
        let python = try #require(which("python3"), "python3 is needed")
        let script = DocText.root().appendingPathComponent(Self.pythonExample).path
        let first = try await AgentProcess(["--demo"])
        defer { try? FileManager.default.removeItem(at: first.directory) }
        // A reconnect deadline of the hang limit: the new agent below may be slow to start on a
        // loaded machine, and the example waits for it, however long that takes.
        // Connections admitted so far: the start's PING, and this STATS.
        let admitted = try #require(try await first.stats()["connections_total"])
        let example = try LineProcess([python, script, "--socket", first.socketPath, "--reconnect-deadline", "300"])
        defer { example.killIfRunning() }

        // A batch: every request written before any reply is read; the replies, in their order.
        try await example.send("GET vehicle v-1; GET trip t-7 600; PING; INFO vehicle v-1; GET vehicle v-2")
        let batch = try await Self.replies(example, 5)
        let vehicle = try Self.token(batch[0], claim: "vehicleid", is: "v-1")
        _ = try Self.token(batch[1], claim: "tripid", is: "t-7")
        #expect(batch[2] == "PONG")
        #expect(batch[3].hasPrefix("OK cached=yes token=yes"), "\(batch[3])")
        _ = try Self.token(batch[4], claim: "vehicleid", is: "v-2")

        // A second batch on the same connection: the cached token, and no connection since the first.
        try await example.send("GET vehicle v-1; STATS")
        let again = try await Self.replies(example, 2)
        #expect(again[0] == batch[0], "the cached token")
        #expect(
            again[1].split(separator: " ").contains("connections_total=\(admitted + 1)"),
            "one connection for both batches: \(again[1])"
        )

        // The agent stops: the connection closes. A batch sent now waits for a new agent on the
        // same socket, and is answered by it, in order.
        #expect(await first.stop() == 0, "\(first.log)")
        try await example.send("GET vehicle v-1; PING; GET trip t-7")
        let second = try await AgentProcess(["--demo"], socketPath: first.socketPath)
        defer { try? FileManager.default.removeItem(at: second.directory) }
        let afterRestart = try await Self.replies(example, 3)
        let renewed = try Self.token(afterRestart[0], claim: "vehicleid", is: "v-1")
        #expect(renewed != vehicle, "the new agent's token (a new demo key), not the old one")
        #expect(afterRestart[1] == "PONG")
        _ = try Self.token(afterRestart[2], claim: "tripid", is: "t-7")

        let outcome = try await example.finish()
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(
            outcome.stderr.contains("reconnected to \(first.socketPath); sending 3 unanswered requests again"),
            "\(outcome.stderr)"
        )
        print("python example, after the restart: \(outcome.stderr)", terminator: "")
        #expect(await second.stop() == 0, "\(second.log)")
    }

    /// The README's Python excerpt is the example's code: each of its lines, without its comment,
    /// is a line of the file (`...` stands for lines left out).
    @Test func theReadmesPythonExcerptIsTheExamplesCode() throws {
        let readme = try DocText.read("README.md")
        let excerpts = DocText.fencedBlocks(readme).filter { $0.language == "python" }
        try #require(excerpts.count == 1, "README: \(excerpts.count) python blocks, not the one excerpt")
        let file = try DocText.read(Self.pythonExample).components(separatedBy: "\n")
            .map { $0.trimmingCharacters(in: .whitespaces) }
        var checked = 0
        for line in excerpts[0].lines {
            let code = (line.range(of: "  #").map { String(line[..<$0.lowerBound]) } ?? line)
                .trimmingCharacters(in: .whitespaces)
            if code.isEmpty || code == "..." { continue }
            checked += 1
            #expect(
                file.contains { $0 == code || $0.hasPrefix(code + "  #") },
                "README line \(excerpts[0].line): `\(code)` is not a line of \(Self.pythonExample)"
            )
        }
        #expect(checked > 5)
    }

    @Test func thePythonMetadataExampleGetsTheEntrysTokenThroughGoogleAuth() async throws {
        typealias Agent = AccessTokenAgent
        let python = try await MetadataAgent.googleAuthPython()
        let script = DocText.root().appendingPathComponent(Self.pythonMetadataExample).path
        let fake = try await Agent.fake()
        let port = try MetadataAgent.freePort()
        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = try Agent.config(
            fake,
            directory: directory,
            entries: #""fleet-admin": \#(Agent.entry(Agent.admin))"#,
            extra: MetadataAgent.key(port: port, defaultEntry: "fleet-admin")
        )
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Agent.environment(fake, directory: directory)
        )
        defer { try? FileManager.default.removeItem(at: agent.directory) }
        let listening = await eventually { agent.log.contains("serving the GCE metadata endpoint") }
        try #require(listening, "the endpoint did not start:\n\(agent.log)")

        // The worker's environment, as the README gives it; no credentials file of its own.
        var environment = ProcessInfo.processInfo.environment
        environment["GCE_METADATA_HOST"] = "127.0.0.1:\(port)"
        environment["GCE_METADATA_IP"] = "127.0.0.1:\(port)"
        environment["NO_PROXY"] = "127.0.0.1,localhost"
        environment["no_proxy"] = "127.0.0.1,localhost"
        environment["GOOGLE_APPLICATION_CREDENTIALS"] = ""
        environment["CLOUDSDK_CONFIG"] = directory.appendingPathComponent("no-gcloud").path
        let outcome = try await run(python, [script], environment: environment)
        #expect(outcome.status == 0, "\(outcome.stderr)")
        #expect(outcome.stdout.hasPrefix("\(Agent.admin) in fake-project: an access token until "), "\(outcome.stdout)")
        let calls = fake.generateAccessTokenCalls
        #expect(calls.count == 1 && calls.first?.account == Agent.admin, "\(calls)")
        if let issued = calls.first?.issued {
            #expect(!outcome.stdout.contains(issued), "the example prints no token")
            #expect(
                try await agent.send("GET access fleet-admin").first.flatMap(tokenOf) == issued,
                "the socket's token"
            )
        }
        print("python metadata example: \(outcome.stdout)", terminator: "")
        #expect(await agent.stop() == 0, "\(agent.log)")
        await fake.stop()
    }

    /// The example's next `count` lines; throws, with what it wrote to standard error, when it
    /// ends (or hangs) first.
    static func replies(_ example: LineProcess, _ count: Int) async throws -> [String] {
        let lines = try await example.readLines(count)
        if lines.count < count {
            example.killIfRunning()
            let outcome = try await example.finish()
            throw AgentError("the example printed \(lines), then ended (\(outcome.status)):\n\(outcome.stderr)")
        }
        return lines
    }

    /// The token of an `OK <jwt> <expires-at>` reply, whose `authorization` claim gives `claim`
    /// the value `id`.
    static func token(_ reply: String, claim: String, is id: String) throws -> String {
        let fields = reply.split(separator: " ").map(String.init)
        try #require(fields.count == 3 && fields[0] == "OK", "not a token reply: \(reply.prefix(80))")
        let authorization = jwtPart(fields[1], 1)?["authorization"] as? [String: Any]
        #expect(authorization?[claim] as? String == id, "\(claim) of \(String(describing: authorization))")
        let expiry = try #require(Double(fields[2]))
        #expect(expiry > Date().timeIntervalSince1970)
        return fields[1]
    }
}

/// A process driven line by line: lines written to its standard input, its standard output read
/// a line at a time (on threads of their own, never on the concurrency pool), its standard error
/// read once it has ended.
final class LineProcess: @unchecked Sendable {
    private let process = ChildProcess()
    private let input = Pipe()
    private let output = Pipe()
    private let errors = Pipe()

    init(_ command: [String]) throws {
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// Writes `line` and its LF.
    func send(_ line: String) async throws {
        let writer = input.fileHandleForWriting
        try await offPool { try writer.write(contentsOf: Data((line + "\n").utf8)) }
    }

    /// The next `count` lines it prints, fewer if it ends first or prints nothing for the hang
    /// limit.
    func readLines(_ count: Int) async throws -> [String] {
        let descriptor = output.fileHandleForReading.fileDescriptor
        return try await offPool {
            var lines: [String] = []
            while lines.count < count,
                let line = readLineBlocking(from: descriptor, timeoutMilliseconds: Int32(hangLimit * 1000))
            {
                lines.append(line)
            }
            return lines
        }
    }

    /// Closes its standard input and waits for it to end (the example's own time-outs bound the
    /// wait); its exit status and what it wrote to standard error.
    func finish() async throws -> (status: Int32, stderr: String) {
        try? input.fileHandleForWriting.close()
        let process = self.process
        let errors = self.errors.fileHandleForReading
        return try await offPool {
            let stderr = errors.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: stderr, as: UTF8.self))
        }
    }

    /// Kills it if it still runs (a test that failed before ``finish()``); never waits.
    func killIfRunning() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
