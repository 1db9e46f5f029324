import Foundation
import NIOCore
import NIOPosix
import TestSupport

/// The real `fleet-tokend` binary, started on a temporary socket for one test.
final class AgentProcess: @unchecked Sendable {
    /// The built binary: `$FLEET_TOKEND_BINARY`, else next to the test bundle.
    static var binary: String {
        if let path = ProcessInfo.processInfo.environment["FLEET_TOKEND_BINARY"] { return path }
        let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        var candidate = bundle
        while candidate.path != "/" {
            let path = candidate.appendingPathComponent("fleet-tokend").path
            if FileManager.default.isExecutableFile(atPath: path) { return path }
            candidate = candidate.deletingLastPathComponent()
        }
        return bundle.appendingPathComponent("fleet-tokend").path
    }

    let directory: URL
    let socketPath: String
    let logPath: String
    private let process = ChildProcess()

    /// Starts `fleet-tokend serve` with `arguments` plus `--socket` (a new temporary path unless
    /// `socketPath` is given) and waits until it answers `PING` with a line starting with
    /// `readyReply` (`PONG`; an agent waiting for configuration answers an error).
    init(
        _ arguments: [String],
        socketPath: String? = nil,
        environment: [String: String] = [:],
        launcher: [String]? = nil,
        readyTimeout: Double = 120,
        output: FileHandle? = nil,
        readyReply: String = "PONG"
    ) async throws {
        directory = try Self.makeTemporaryDirectory()
        self.socketPath = socketPath ?? directory.appendingPathComponent("tokens.sock").path
        logPath = directory.appendingPathComponent("agent.log").path
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let command = [Self.binary, "serve", "--socket", self.socketPath] + arguments
        if let launcher {
            // e.g. ["/bin/sh", "-c", "… exec \"$0\" \"$@\""]: the launcher runs the command.
            process.executableURL = URL(fileURLWithPath: launcher[0])
            process.arguments = Array(launcher.dropFirst()) + command
        } else {
            process.executableURL = URL(fileURLWithPath: command[0])
            process.arguments = Array(command.dropFirst())
        }
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        // `output`, when given, takes stdout and stderr instead of the log file.
        let log = try output ?? FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardError = log
        process.standardOutput = log
        try process.run()
        let deadline = Date().addingTimeInterval(readyTimeout)
        while Date() < deadline {
            if process.isRunning == false { throw AgentError("agent exited early:\n\(self.log)") }
            let reply = try? await SocketClient.exchange(self.socketPath, "PING\n", lines: 1)
            if let reply, reply.count == 1, reply[0].hasPrefix(readyReply) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        // Not left running behind the failed test; waited for off the pool.
        kill(process.processIdentifier, SIGKILL)
        let process = self.process
        try? await offPool { process.waitUntilExit() }
        throw AgentError("agent did not answer PING in time:\n\(self.log)")
    }

    /// An agent still running when its test lets go of it (a test that threw before `stop()`)
    /// is killed, so it does not outlive the run holding its socket and its fetches. Its reaper
    /// thread collects it.
    ///
    /// Its directory (socket, log, anything the test put there) goes with it: a test's agent
    /// leaves nothing behind once its test lets go of it.
    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        TestTemporary.remove(directory.path)
    }

    /// Everything the agent wrote to stdout and stderr so far.
    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The agent's process id.
    var pid: Int32 { process.processIdentifier }

    /// Sends SIGTERM and waits for the exit status.
    @discardableResult
    func stop() async -> Int32 {
        if process.isRunning { process.terminate() }
        for _ in 0..<400 where process.isRunning { try? await Task.sleep(for: .milliseconds(25)) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        let process = self.process
        try? await offPool { process.waitUntilExit() }
        return process.terminationStatus
    }

    /// Sends `lines` (LF added to each) on one connection and returns the replies.
    func send(_ lines: String...) async throws -> [String] {
        try await SocketClient.exchange(socketPath, lines.map { $0 + "\n" }.joined(), lines: lines.count)
    }

    /// The agent's STATS as a dictionary of integers.
    func stats() async throws -> [String: Int] {
        let reply = try await send("STATS")
        var fields: [String: Int] = [:]
        for field in reply.first?.split(separator: " ").dropFirst() ?? [] {
            let pair = field.split(separator: "=")
            if pair.count == 2, let value = Int(pair[1]) { fields[String(pair[0])] = value }
        }
        return fields
    }

    static func makeTemporaryDirectory() throws -> URL {
        // Short paths: a Unix socket path must fit in 108 bytes. 0755 whatever the umask: the
        // agent refuses a socket directory others may write.
        URL(fileURLWithPath: try TestTemporary.directory("ftd"))
    }
}

struct AgentError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A SwiftNIO Unix-socket client for the tests.
enum SocketClient {
    /// Connects, writes `request`, optionally half-closes, and reads until `lines` reply lines
    /// arrived or the agent closed the connection. Returns the lines without LF.
    static func exchange(
        _ path: String,
        _ request: String,
        lines expected: Int? = nil,
        halfClose: Bool = false,
        timeout: Duration = hangLimitDuration
    ) async throws -> [String] {
        try await exchange(path, Array(request.utf8), lines: expected, halfClose: halfClose, timeout: timeout)
    }

    static func exchange(
        _ path: String,
        _ request: [UInt8],
        lines expected: Int? = nil,
        halfClose: Bool = false,
        timeout: Duration = hangLimitDuration
    ) async throws -> [String] {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(.allowRemoteHalfClosure, value: true)
            .connect(unixDomainSocketPath: path) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(
                        wrappingChannelSynchronously: channel,
                        configuration: .init(isOutboundHalfClosureEnabled: true)
                    )
                }
            }
        let reader = Task {
            try await channel.executeThenClose { inbound, outbound in
                // An agent that refuses a connection writes its one line and closes at once, so
                // the request's write can fail on a closed channel: what it wrote is still read.
                var writeError: (any Error)?
                do {
                    try await outbound.write(ByteBuffer(bytes: request))
                    if halfClose { outbound.finish() }
                } catch {
                    writeError = error
                }
                var received: [UInt8] = []
                var lines: [String] = []
                do {
                    for try await chunk in inbound {
                        received += chunk.readableBytesView
                        while let newline = received.firstIndex(of: UInt8(ascii: "\n")) {
                            lines.append(String(decoding: received[..<newline], as: UTF8.self))
                            received.removeSubrange(...newline)
                        }
                        if let expected, lines.count >= expected { break }
                    }
                } catch {
                    if lines.isEmpty { throw writeError ?? error }
                }
                if lines.isEmpty, let writeError { throw writeError }
                return lines
            }
        }
        let timer = Task {
            try await Task.sleep(for: timeout)
            reader.cancel()
            try? await channel.channel.close()
        }
        defer { timer.cancel() }
        return try await reader.value
    }
}

/// Runs a command and returns its exit status, standard output and standard error.
@discardableResult
func run(_ executable: String, _ arguments: [String], stdin: String? = nil, environment: [String: String]? = nil)
    async throws -> (status: Int32, stdout: String, stderr: String)
{
    try await offPool { try runBlocking(executable, arguments, stdin: stdin, environment: environment) }
}

private func runBlocking(_ executable: String, _ arguments: [String], stdin: String?, environment: [String: String]?)
    throws -> (status: Int32, stdout: String, stderr: String)
{
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    let input = Pipe()
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    let stdout = out.fileHandleForReading.readDataToEndOfFile()
    let stderr = err.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

/// Where a tool is on PATH, if anywhere.
func which(_ tool: String) -> String? {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let path = "\(directory)/\(tool)"
        if FileManager.default.isExecutableFile(atPath: path) { return path }
    }
    return nil
}

/// Decodes a JWT part (base64url) into a JSON object.
func jwtPart(_ token: String, _ index: Int) -> [String: Any]? {
    let parts = token.split(separator: ".")
    guard parts.count == 3 else { return nil }
    var base64 = String(parts[index]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    while base64.count % 4 != 0 { base64 += "=" }
    guard let data = Data(base64Encoded: base64) else { return nil }
    return try? JSONSerialization.jsonObject(with: data) as? [String: Any]
}
