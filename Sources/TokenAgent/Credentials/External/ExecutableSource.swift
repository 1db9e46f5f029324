import Synchronization
import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Google's pluggable auth (`credential_source.executable`), run as google-auth's `pluggable.py`
/// runs it, and only when `GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1` (checked at start).
///
/// The command is split on spaces and run without a shell, in a process group of its own, with
/// standard input from `/dev/null` and standard error discarded. Its environment is `PATH` and
/// Google's documented variables, nothing of the agent's own. At its time-out its whole process
/// group is killed. Its standard output, at most ``maxOutputBytes``, is the response:
/// `version` 1, `success`, `token_type`, the token in `id_token` or `saml_response`,
/// `expiration_time`, and `code` and `message` when `success` is false. With `output_file`, a
/// response kept there is used while it is unexpired, and read when the program prints nothing.
struct ExecutableSource: Sendable, Hashable {
    /// The program and its arguments.
    var command: [String]
    /// Milliseconds the program may run (`timeout_millis`).
    var timeoutMilliseconds: Int
    /// Where the program keeps its response (`output_file`), if it does.
    var outputFile: String?

    /// The time-outs google-auth accepts, milliseconds.
    static let timeouts = 5000...120_000
    /// The time-out unless the file sets one, milliseconds.
    static let defaultTimeout = 30_000
    /// The most of the program's output (or of its output file) read, bytes.
    static let maxOutputBytes = 64 * 1024
    /// The `PATH` given to the program when the agent has none.
    static let defaultPath = "/usr/local/bin:/usr/bin:/bin"

    init(_ value: StrictJSON?, file: String) throws(ConfigurationError) {
        func refuse(_ text: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(file): credential_source.executable \(text)")
        }
        guard case .object(let members)? = value else { throw refuse("is not an object") }
        func member(_ name: String) -> StrictJSON? { members.first { $0.name == name }?.value }
        guard case .string(let text)? = member("command"),
            !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F })
        else { throw refuse("command must be a string without control characters") }
        command = text.split(separator: " ").map(String.init)
        guard !command.isEmpty else { throw refuse("command is empty") }
        timeoutMilliseconds = Self.defaultTimeout
        if let timeout = member("timeout_millis") {
            guard case .number(let milliseconds) = timeout, milliseconds == milliseconds.rounded(),
                Self.timeouts.contains(Int(milliseconds))
            else {
                throw refuse(
                    "timeout_millis must be a whole number from \(Self.timeouts.lowerBound) to \(Self.timeouts.upperBound)"
                )
            }
            timeoutMilliseconds = Int(milliseconds)
        }
        switch member("output_file") {
        case nil, .null?: outputFile = nil
        case .string(let path)? where path.hasPrefix("/") && !path.utf8.contains(where: { $0 < 0x20 }):
            outputFile = path
        default: throw refuse("output_file must be an absolute path")
        }
    }

    /// What the program is, for messages: its path, never its arguments' values past the first.
    var name: String { EndpointSecurity.printable(command[0]) }

    /// The subject token: from the output file while it holds an unexpired response, else from
    /// a run of the program.
    func subjectToken(
        audience: String,
        tokenType: String,
        impersonatedAccount: String?,
        environment: [String: String],
        now: @Sendable () -> Double
    ) async throws(CredentialsError) -> String {
        if let outputFile, let kept = try? BoundedFile.read(outputFile, limit: Self.maxOutputBytes), !kept.isEmpty,
            case .success(let token)? = try? response(kept, now: now(), requireExpiry: true)
        {
            return token
        }
        var variables = [
            "PATH=\(environment["PATH"] ?? Self.defaultPath)",
            "GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE=\(audience)",
            "GOOGLE_EXTERNAL_ACCOUNT_TOKEN_TYPE=\(tokenType)",
            "GOOGLE_EXTERNAL_ACCOUNT_INTERACTIVE=0",
        ]
        if let impersonatedAccount {
            variables.append("GOOGLE_EXTERNAL_ACCOUNT_IMPERSONATED_EMAIL=\(impersonatedAccount)")
        }
        if let outputFile { variables.append("GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE=\(outputFile)") }
        let run = ProcessRun(command: command, environment: variables, timeoutMilliseconds: timeoutMilliseconds)
        let outcome = await withTaskCancellationHandler {
            await run.outcome()
        } onCancel: {
            run.kill()
        }
        switch outcome {
        case .failedToStart(let error):
            throw CredentialsError(
                .credentials,
                "executable \(name) could not be started: \(String(cString: strerror(error))) (credential_source.executable)"
            )
        case .timedOut:
            throw CredentialsError(
                .transient,
                "executable \(name) timed out after \(timeoutMilliseconds) ms (timeout_millis); its process group was killed"
            )
        case .outputTooLarge:
            throw CredentialsError(.transient, "executable \(name) printed over \(Self.maxOutputBytes / 1024) KiB")
        case .exited(let status, let output):
            guard status == 0 else {
                throw CredentialsError(.transient, "executable \(name) exited with status \(status)")
            }
            var bytes = output
            if String(decoding: bytes, as: UTF8.self).trimmingWhitespaceAndNewlines().isEmpty, let outputFile {
                bytes = (try? BoundedFile.read(outputFile, limit: Self.maxOutputBytes)) ?? []
            }
            switch try response(bytes, now: now(), requireExpiry: outputFile != nil) {
            case .success(let token): return token
            case .failure(let error): throw error
            }
        case .killedBySignal(let signal):
            throw CredentialsError(.transient, "executable \(name) was killed by signal \(signal)")
        }
    }

    /// Reads a response: the token, or the program's own failure (`success` false: its `code`
    /// and `message`). Throws when the response is malformed or expired.
    func response(
        _ bytes: [UInt8],
        now: Double,
        requireExpiry: Bool
    ) throws(CredentialsError) -> Result<String, CredentialsError> {
        func bad(_ text: String) -> CredentialsError {
            CredentialsError(.credentials, "executable \(name) response \(text)")
        }
        let object: StrictJSON.Object?
        do { object = try StrictJSON.object(bytes: bytes) } catch { throw bad("gives \(error.printable) twice") }
        guard let object else { throw bad("is not a JSON object") }
        guard case .number(let version)? = object["version"] else { throw bad("lacks version") }
        guard version == 1 else { throw bad("has version \(version), not 1") }
        guard case .bool(let success)? = object["success"] else { throw bad("lacks success") }
        func text(_ name: String) -> String? {
            if case .string(let value)? = object[name] { return value }
            return nil
        }
        guard success else {
            guard let code = text("code"), let message = text("message") else {
                throw bad("says success false without code and message")
            }
            return .failure(
                CredentialsError(
                    .credentials,
                    "executable \(name) answered success false: code \(EndpointSecurity.printable(code)), message "
                        + EndpointSecurity.printable(message)
                )
            )
        }
        guard let type = text("token_type") else { throw bad("lacks token_type") }
        let field: String
        switch type {
        case "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token": field = "id_token"
        case "urn:ietf:params:oauth:token-type:saml2": field = "saml_response"
        default: throw bad("has token_type \(EndpointSecurity.printable(type)), none of jwt, id_token or saml2")
        }
        if case .number(let expiry)? = object["expiration_time"] {
            guard expiry > now else { throw CredentialsError(.transient, "executable \(name) response is expired") }
        } else if requireExpiry {
            throw bad("lacks expiration_time, which an output_file needs")
        }
        guard let token = text(field), !token.isEmpty else { throw bad("lacks \(field)") }
        return .success(token)
    }
}

/// One run of a program on a thread of its own: spawned in a new process group, its standard
/// output read up to a bound, the whole group killed at the time-out or on ``kill()``.
final class ProcessRun: Sendable {
    enum Outcome: Sendable {
        case exited(status: Int32, output: [UInt8])
        case killedBySignal(Int32)
        case timedOut
        case outputTooLarge
        case failedToStart(Int32)
    }

    let command: [String]
    let environment: [String]
    let timeoutMilliseconds: Int
    /// The process group once started; `-1` when asked to stop before it was.
    private let group = Mutex<pid_t>(0)

    init(command: [String], environment: [String], timeoutMilliseconds: Int) {
        self.command = command
        self.environment = environment
        self.timeoutMilliseconds = timeoutMilliseconds
    }

    /// Kills the process group (a cancelled fetch), or keeps it from starting.
    func kill() {
        group.withLock { group in
            if group > 0 { _ = Glibc.kill(-group, SIGKILL) } else { group = -1 }
        }
    }

    /// Runs the program on a thread of its own and waits for its end.
    func outcome() async -> Outcome {
        await withCheckedContinuation { continuation in
            let started = DetachedThread.start { continuation.resume(returning: self.run()) }
            if !started { continuation.resume(returning: .failedToStart(EAGAIN)) }
        }
    }

    private func run() -> Outcome {
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { return .failedToStart(errno) }
        // Not inherited by programs other runs start at the same time.
        for end in pipeEnds { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        posix_spawnattr_setflags(
            &attributes,
            Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
        )
        posix_spawnattr_setpgroup(&attributes, 0)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGPIPE, SIGHUP, SIGINT, SIGTERM, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        let arguments = command.map { strdup($0) } + [nil]
        let variables = environment.map { strdup($0) } + [nil]
        defer {
            arguments.forEach { free($0) }
            variables.forEach { free($0) }
        }
        var pid: pid_t = 0
        let spawned = group.withLock { group -> Int32 in
            guard group == 0 else { return ECANCELED }
            let result = posix_spawnp(&pid, command[0], &actions, &attributes, arguments, variables)
            if result == 0 { group = pid }
            return result
        }
        close(pipeEnds[1])
        guard spawned == 0 else {
            close(pipeEnds[0])
            return .failedToStart(spawned)
        }
        defer { close(pipeEnds[0]) }
        let deadline = Self.monotonicMilliseconds() + Int64(timeoutMilliseconds)
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        var tooLarge = false
        reading: while true {
            let left = deadline - Self.monotonicMilliseconds()
            guard left > 0 else { return finish(pid: pid, killedFor: .timedOut) }
            var poller = pollfd(fd: pipeEnds[0], events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(left, 1000)))
            if ready < 0, errno == EINTR { continue }
            if ready <= 0 { continue }
            let got = chunk.withUnsafeMutableBytes { read(pipeEnds[0], $0.baseAddress, $0.count) }
            if got < 0, errno == EINTR { continue }
            if got <= 0 { break reading }
            output += chunk[..<got]
            if output.count > ExecutableSource.maxOutputBytes {
                tooLarge = true
                break reading
            }
        }
        if tooLarge { return finish(pid: pid, killedFor: .outputTooLarge) }
        // Its output ended: it has the rest of its time to exit.
        var status: Int32 = 0
        while true {
            let waited = waitpid(pid, &status, WNOHANG)
            if waited == pid { break }
            if waited < 0, errno != EINTR { return .exited(status: -1, output: output) }
            if Self.monotonicMilliseconds() >= deadline { return finish(pid: pid, killedFor: .timedOut) }
            usleep(5000)
        }
        group.withLock { $0 = -1 }
        if status & 0x7F == 0 { return .exited(status: (status >> 8) & 0xFF, output: output) }
        return .killedBySignal(status & 0x7F)
    }

    /// Kills the group, reaps the program, and gives `outcome`.
    private func finish(pid: pid_t, killedFor outcome: Outcome) -> Outcome {
        group.withLock { group in
            _ = Glibc.kill(-pid, SIGKILL)
            group = -1
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
        return outcome
    }

    private static func monotonicMilliseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int64(now.tv_sec) * 1000 + Int64(now.tv_nsec) / 1_000_000
    }
}
