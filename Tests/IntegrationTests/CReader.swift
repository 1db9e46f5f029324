import Foundation
import Synchronization
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The C reader of Examples/shm-reader, built once per test run with the system's C compiler, on a
/// thread of its own the first time a test needs it (never on the concurrency pool): first the
/// library it is a thin program over, libfleet-tokend-reader (a static library, as
/// packaging/build-deb builds it, with the segment's layout header of Sources/CTokenSegment),
/// then the program linked against it.
enum CReader {
    static let compiler: String? = which("cc") ?? which("gcc")

    /// Whether the reader can be built: a C compiler is on PATH. A reader that then fails to
    /// compile fails the tests that need it.
    static var available: Bool { compiler != nil }

    private static let build = Mutex<Task<Result<String, AgentError>, Never>?>(nil)

    /// The built reader's path.
    static func path() async throws -> String {
        let task = build.withLock { build in
            if let build { return build }
            let task = Task { await compile() }
            build = task
            return task
        }
        return try await task.value.get()
    }

    private static func compile() async -> Result<String, AgentError> {
        guard let compiler else { return .failure(AgentError("no C compiler")) }
        guard let archiver = which("ar") else { return .failure(AgentError("no ar for the C reader library")) }
        func repository(_ path: String) -> String {
            URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../../" + path).standardized.path
        }
        let library = repository("libfleet-tokend-reader")
        let includes = ["-I", repository("Sources/CTokenSegment/include"), "-I", library]
        let object = TestTemporary.root + "/fleet_tokend_reader.o"
        let archive = TestTemporary.root + "/libfleet-tokend-reader.a"
        let output = TestTemporary.root + "/shm-reader"
        let flags = ["-O2", "-std=c11", "-Wall", "-Werror"]
        let steps: [(String, String, [String])] = [
            (
                "the C reader library did not compile", compiler,
                flags + ["-fPIC"] + includes + ["-c", "-o", object, library + "/fleet_tokend_reader.c"]
            ),
            ("the C reader library did not archive", archiver, ["rcs", archive, object]),
            (
                "the C reader did not compile", compiler,
                flags + includes + [
                    "-o", output, repository("Examples/shm-reader/shm_reader.c"),
                    "-L", TestTemporary.root, "-lfleet-tokend-reader",
                ]
            ),
        ]
        for (failure, tool, arguments) in steps {
            guard let result = try? await run(tool, arguments) else {
                return .failure(AgentError("\(tool) did not run"))
            }
            guard result.status == 0 else { return .failure(AgentError("\(failure):\n\(result.stderr)")) }
        }
        return .success(output)
    }
}

/// A running C reader (another process): maps a kind's segment and answers ids line by line.
final class SegmentReaderProcess: @unchecked Sendable {
    private let process = ChildProcess()
    private let input = Pipe()
    private let output = Pipe()
    /// The reader's first line: `SEGMENT generation=… size=…`, or why it has none.
    private(set) var greeting: String?

    /// A reader of `kind`'s segment on the agent at `socket`, run as `user` when given. A reader
    /// that will read flat out (`STRESS`) runs `yielding`: at the lowest CPU priority (nice 19),
    /// so that its busy loop takes only the CPU nothing else wants. Eight of them at normal
    /// priority starved a whole parallel test run of CPU for the minute or two they read, until
    /// unrelated tests' hang detectors fired.
    init(socket: String, kind: String, runAs user: String? = nil, yielding: Bool = false) async throws {
        let reader = try await CReader.path()
        var command = [reader, socket, kind]
        if let user { command = [which("runuser")!, "-u", user, "--"] + command }
        if yielding { command = [which("nice")!, "-n", "19"] + command }
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        greeting = try await readLine()
    }

    /// Sends `line` without waiting for an answer.
    func send(_ line: String) async throws {
        let writer = input.fileHandleForWriting
        try await offPool { try writer.write(contentsOf: Data((line + "\n").utf8)) }
    }

    /// Sends `line` (an id, or `SEALCHECK`) and reads the answer, waiting at most `seconds` (a
    /// hang detector).
    func ask(_ line: String, within seconds: Int32 = 30) async throws -> String? {
        let writer = input.fileHandleForWriting
        try await offPool { try writer.write(contentsOf: Data((line + "\n").utf8)) }
        return try await readLine(within: seconds)
    }

    /// Reads one line the reader wrote (the answer to an earlier ``send(_:)``), waiting at most
    /// `seconds` (a hang detector).
    func readLine(within seconds: Int32 = 30) async throws -> String? {
        let descriptor = output.fileHandleForReading.fileDescriptor
        return try await offPool { readLineBlocking(from: descriptor, timeoutMilliseconds: seconds * 1000) }
    }

    func stop() {
        try? input.fileHandleForWriting.close()
        if process.isRunning { process.terminate() }
    }
}
