import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `fake-google`, the program that scripts and `serve-demo --google` run: a test double of Google's
/// endpoints, which listens on loopback only and says so when it starts.
@Suite("fake-google, the program")
struct FakeGoogleCommandTests {
    /// The built `fake-google`, beside the built agent.
    static var binary: String {
        URL(fileURLWithPath: AgentProcess.binary).deletingLastPathComponent().appendingPathComponent("fake-google").path
    }

    static let banner = "fake-google: a test double of Google's endpoints, loopback only; never point production at it"

    @Test(arguments: ["0.0.0.0", "::", "192.0.2.1", "10.0.0.1", "128.0.0.1", "::ffff:127.0.0.1", "example.com", ""])
    func refusesAnAddressBeyondLoopback(_ host: String) async throws {
        let outcome = try await TestProcess.run([Self.binary, "--port", "0", "--host", host])
        #expect(outcome.status == 2, "fake-google --host \(host) exited \(outcome.status)")
        let message = "fake-google: --host \(host) refused: fake-google is a test double and listens on loopback only"
        #expect(outcome.standardError.hasPrefix(message), "\(outcome.standardError)")
        #expect(!outcome.standardError.contains(Self.banner), "it announced itself before refusing")
        #expect(outcome.standardOutput.isEmpty, "it printed what a listening fake prints: \(outcome.standardOutput)")
    }

    @Test(arguments: ["127.0.0.1", "127.0.0.2"])
    func listensOnLoopbackAndSaysItIsATestDouble(_ host: String) async throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: Self.binary)
        process.arguments = ["--port", "0", "--host", host]
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let descriptor = output.fileHandleForReading.fileDescriptor
        let lines = try await offPool { () -> [String] in
            var lines: [String] = []
            while let line = readLineBlocking(from: descriptor, timeoutMilliseconds: Int32(hangLimit * 1000)) {
                lines.append(line)
                if line.hasPrefix("listening ") { break }
            }
            return lines
        }
        process.terminate()
        let reader = errors.fileHandleForReading
        let standardError = try await offPool { String(decoding: reader.readDataToEndOfFile(), as: UTF8.self) }
        try await offPool { process.waitUntilExit() }
        let port = try #require(lines.last.flatMap { $0.hasPrefix("listening ") ? Int($0.dropFirst(10)) : nil })
        #expect(port > 0)
        #expect(lines.contains("iam-endpoint http://\(host):\(port)"), "\(lines)")
        #expect(standardError.hasPrefix(Self.banner + "\n"), "\(standardError)")
    }
}
