#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Why a subprocess could not be run.
public enum SubprocessError: Error, Sendable, CustomStringConvertible {
    /// `call` failed with `errno`.
    case system(call: String, errno: Int32)
    /// The process did not exit within the time allowed and was killed.
    case timedOut(command: String, seconds: Double)

    public var description: String {
        switch self {
        case .system(let call, let errno): "\(call) failed: errno \(errno)"
        case .timedOut(let command, let seconds): "\(command) did not exit within \(seconds) s and was killed"
        }
    }
}

/// How a finished subprocess ended and what it wrote.
public struct ProcessOutcome: Sendable {
    /// The exit status (`128 + signal` for a process killed by a signal).
    public var status: Int32
    /// What it wrote to its standard output.
    public var standardOutput: String
    /// What it wrote to its standard error.
    public var standardError: String
}

/// A process started with `posix_spawnp`, its output going to temporary files; waited for on a
/// thread of its own (``wait(timeout:)``), never on Swift concurrency's pool.
public final class TestProcess: Sendable {
    /// The process id.
    public let pid: pid_t
    private let command: String
    private let outputPath: String
    private let errorPath: String

    /// Starts `arguments` (the first found on `PATH`) with the current environment plus
    /// `environment`, standard input from /dev/null.
    public init(_ arguments: [String], environment: [String: String] = [:]) throws {
        command = arguments.joined(separator: " ")
        outputPath = try Self.temporaryFile()
        errorPath = try Self.temporaryFile()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_TRUNC, 0o600)
        posix_spawn_file_actions_addopen(&actions, 2, errorPath, O_WRONLY | O_TRUNC, 0o600)

        var merged: [String: String] = [:]
        var index = 0
        while let entry = environ[index] {
            let text = String(cString: entry)
            if let equals = text.firstIndex(of: "=") {
                merged[String(text[..<equals])] = String(text[text.index(after: equals)...])
            }
            index += 1
        }
        merged.merge(environment) { _, new in new }

        let argv = arguments.map { strdup($0) } + [nil]
        let envp = merged.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var pid = pid_t()
        let status = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
        guard status == 0 else { throw SubprocessError.system(call: "posix_spawnp \(arguments[0])", errno: status) }
        self.pid = pid
    }

    /// Runs `arguments` to the end and returns how it ended; kills it past `timeout` seconds.
    public static func run(
        _ arguments: [String],
        environment: [String: String] = [:],
        timeout: Double = hangLimit
    ) async throws -> ProcessOutcome {
        try await TestProcess(arguments, environment: environment).wait(timeout: timeout)
    }

    /// Waits, on a thread of its own, for the process to exit; kills it (SIGKILL) and throws
    /// past `timeout` seconds (a hang detector, not a latency bound).
    public func wait(timeout: Double = hangLimit) async throws -> ProcessOutcome {
        let pid = self.pid
        let command = self.command
        let status = try await offPool { () throws -> Int32 in
            var waited = 0.0
            while true {
                var status: Int32 = 0
                let result = waitpid(pid, &status, WNOHANG)
                if result == pid {
                    let signal = status & 0x7f
                    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
                }
                if result < 0 && errno != EINTR { throw SubprocessError.system(call: "waitpid", errno: errno) }
                if waited >= timeout {
                    kill(pid, SIGKILL)
                    var ignored: Int32 = 0
                    _ = waitpid(pid, &ignored, 0)
                    throw SubprocessError.timedOut(command: command, seconds: timeout)
                }
                usleep(10_000)
                waited += 0.01
            }
        }
        defer {
            unlink(outputPath)
            unlink(errorPath)
        }
        return ProcessOutcome(
            status: status,
            standardOutput: Self.read(outputPath),
            standardError: Self.read(errorPath)
        )
    }

    /// Sends `signal` (SIGTERM by default) to the process.
    public func signal(_ signal: Int32 = SIGTERM) {
        kill(pid, signal)
    }

    private static func temporaryFile() throws -> String {
        var template = Array((TestTemporary.root + "/ftd-process-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw SubprocessError.system(call: "mkstemp", errno: errno) }
        close(fd)
        return template.nulTerminatedString
    }

    private static func read(_ path: String) -> String {
        guard let file = fopen(path, "r") else { return "" }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            if count <= 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
