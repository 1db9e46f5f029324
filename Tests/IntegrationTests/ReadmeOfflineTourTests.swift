import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The README's offline tour (key-less signing, access tokens and the metadata endpoint against
/// fake-google): its blocks run in a bash session of their own, as ``ReadmeCommandsTests`` runs
/// the rest, against what `bash scripts/serve-demo --google` runs once it has built,
/// scripts/fake-google-demo, started here on the suite's build with a directory and a metadata
/// port of the test's own.
extension ReadmeCommandsTests {
    static let offlineTourTitle = "Try key-less signing, access tokens and the metadata endpoint offline"
    /// The directory and the metadata endpoint of `serve-demo --google`, as the README writes them.
    static let offlineDirectory = "/tmp/fleet-tokend-$(id -u)/google"
    static let offlineMetadata = "127.0.0.1:8989"

    /// The README's lines of the offline tour: from its heading to the next heading of its level
    /// or above.
    static func offlineTourLines(_ readme: String) throws -> Range<Int> {
        let sections = DocText.sections(readme)
        let index = try #require(
            sections.firstIndex { $0.title == offlineTourTitle },
            "README: no section \(offlineTourTitle)"
        )
        let level = sections[index].level
        let end = sections[(index + 1)...].first { $0.level <= level }?.line ?? Int.max
        return sections[index].line..<end
    }

    @Test func theOfflineTourRunsAgainstTheAgentAndFakeGoogle() async throws {
        let readme = try DocText.read("README.md")
        let offline = try Self.offlineTourLines(readme)
        let blocks = Self.blocks(readme).filter { offline.contains($0.block.line) }
        #expect(
            blocks.contains {
                $0.notRun != nil && $0.block.lines.contains { $0.contains("scripts/serve-demo --google") }
            },
            "README: the offline tour does not show `bash scripts/serve-demo --google`"
        )
        let steps = blocks.filter { $0.notRun == nil }.flatMap { Self.steps($0.block) }
        for step in steps where step.command.isEmpty {
            Issue.record("README line \(step.line): output before any command: \(step.expected)")
        }
        for needed in ["GET access fleet-admin", "openssl dgst", "google.auth.default()", "GCE_METADATA_HOST"] {
            #expect(steps.contains { $0.command.contains(needed) }, "README's offline tour: no block runs `\(needed)`")
        }
        for step in steps {
            if let builds = Self.runsSwiftPM(step.command) {
                Issue.record("README line \(step.line): `\(step.command)` runs \(builds): mark its block not run")
                return
            }
        }
        // serve-demo --google runs the script this test runs, whose defaults are the README's.
        let serveDemo = try DocText.read("scripts/serve-demo")
        #expect(serveDemo.contains("exec bash scripts/fake-google-demo .build-demo/debug"))
        let script = try DocText.read("scripts/fake-google-demo")
        #expect(script.contains("${FLEET_TOKEND_DEMO_DIR:-\(Self.offlineDirectory)}"))
        #expect(script.contains("${FLEET_TOKEND_DEMO_METADATA:-\(Self.offlineMetadata)}"))

        let directory = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let stepsDirectory = directory.appendingPathComponent("steps")
        try FileManager.default.createDirectory(at: stepsDirectory, withIntermediateDirectories: false)
        let demoDirectory = directory.appendingPathComponent("google").path
        let metadata = "127.0.0.1:\(try MetadataAgent.freePort())"
        let binaries = URL(fileURLWithPath: AgentProcess.binary).deletingLastPathComponent().path
        let substitutions = [
            (Self.offlineDirectory, demoDirectory), (Self.offlineMetadata, metadata),
            (try Self.demoBinariesText(readme), binaries),
        ]
        for (text, _) in substitutions {
            #expect(steps.contains { $0.command.contains(text) }, "README's offline tour: no command uses `\(text)`")
        }
        let ownSteps = steps.map { step in
            var step = step
            for (text, replacement) in substitutions {
                step.command = step.command.replacingOccurrences(of: text, with: replacement)
            }
            return step
        }

        let demo = try FakeGoogleDemo(
            binaries: binaries,
            directory: demoDirectory,
            metadata: metadata,
            log: directory.appendingPathComponent("demo.log").path
        )
        let outcome: Result<(Int32, Int), any Error>
        do {
            try await demo.waitUntilReady()
            // The venv may be installed from PyPI first: the time allowed bounds a hang only.
            outcome = .success(try await Self.runSteps(ownSteps, in: stepsDirectory, timeout: Int(hangLimit)))
        } catch {
            outcome = .failure(error)
        }
        let status = try await demo.interrupt()
        let log = demo.log
        let (exitStatus, reached) = try outcome.get()
        Self.check(steps, exitStatus: exitStatus, reached: reached, in: stepsDirectory, log: "demo log:\n\(log)")
        // Ctrl-C stops the agent, then the fake, and leaves nothing behind.
        #expect(status == 0, "scripts/fake-google-demo exit status \(status):\n\(log)")
        #expect(!FileManager.default.fileExists(atPath: demoDirectory), "the demo's directory is left:\n\(log)")
        let fakePort = try #require(FakeGoogleDemo.fakePort(in: log), "no fake-google port in:\n\(log)")
        let refused = try await offPool { (try? LoopbackSocket.connect(to: "127.0.0.1", port: fakePort)) == nil }
        #expect(refused, "fake-google still listens on \(fakePort) after the demo stopped")
        #expect(log.contains("fake-google: a test double of Google's endpoints, loopback only"), "\(log)")
    }
}

/// scripts/fake-google-demo, run as `serve-demo --google` runs it, its output in a log file.
final class FakeGoogleDemo: @unchecked Sendable {
    private let process = ChildProcess()
    private let logPath: String

    init(binaries: String, directory: String, metadata: String, log: String) throws {
        logPath = log
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [DocText.root().appendingPathComponent("scripts/fake-google-demo").path, binaries]
        var environment = ProcessInfo.processInfo.environment
        environment["FLEET_TOKEND_DEMO_DIR"] = directory
        environment["FLEET_TOKEND_DEMO_METADATA"] = metadata
        process.environment = environment
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try handle.close()
    }

    /// Everything the script, the agent and the fake wrote so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits for the script's last line of hints, printed once the agent answers on its socket
    /// and its metadata endpoint; throws when the script ends first.
    func waitUntilReady() async throws {
        let ready = await eventually { self.log.contains("Ctrl-C stops the agent") || !self.process.isRunning }
        guard ready, process.isRunning else { throw AgentError("scripts/fake-google-demo did not start:\n\(log)") }
    }

    /// Sends SIGINT, as Ctrl-C does, and returns the script's exit status. One that has not ended
    /// within the hang limit is killed, with its children (the agent and the fake), and throws.
    func interrupt() async throws -> Int32 {
        let pid = process.processIdentifier
        if process.isRunning { kill(pid, SIGINT) }
        let ended = await eventually { !self.process.isRunning }
        if !ended {
            let children = (try? String(contentsOfFile: "/proc/\(pid)/task/\(pid)/children", encoding: .utf8)) ?? ""
            for child in children.split(separator: " ").compactMap({ pid_t($0) }) { kill(child, SIGKILL) }
            kill(pid, SIGKILL)
        }
        let process = self.process
        try await offPool { process.waitUntilExit() }
        guard ended else { throw AgentError("scripts/fake-google-demo did not stop on SIGINT:\n\(log)") }
        return process.terminationStatus
    }

    /// The fake's port, from the script's `against fake-google on 127.0.0.1:<port>`.
    static func fakePort(in log: String) -> UInt16? {
        let marker = "against fake-google on 127.0.0.1:"
        guard let range = log.range(of: marker) else { return nil }
        return UInt16(log[range.upperBound...].prefix { $0.isNumber })
    }
}
