import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process for the tests: started with `posix_spawn` and reaped by a thread of its own
/// that waits in `waitpid`. It stands in for Foundation's `Process`, whose end is noticed through a
/// `CFSocket` that Foundation watches with `select(2)`: once the test process holds descriptors
/// numbered 1024 or more (a full parallel run does), the end of a child can go unnoticed, and
/// `waitUntilExit()` then never returns (a suite was found hung on such a zombie).
///
/// The subset of `Process` the tests use: set `executableURL`, `arguments`, `environment` and the
/// standard streams (a `FileHandle` or a `Pipe`; `nil` inherits the test's), then `run()`. The
/// child gets only those three descriptors, every signal at its default and none blocked.
final class ChildProcess: @unchecked Sendable {
    enum TerminationReason: Sendable {
        case exit
        case uncaughtSignal
    }

    var executableURL: URL?
    var arguments: [String] = []
    var environment: [String: String]?
    var standardInput: Any?
    var standardOutput: Any?
    var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        /// The raw `waitpid` status, once the child has ended.
        var status: Int32?
    }

    private let state = Mutex(State())
    private let ended = DispatchGroup()

    /// The child's process id (0 before `run()`).
    var processIdentifier: Int32 { state.withLock { $0.pid } }

    /// Whether the child was started and has not been reaped yet.
    var isRunning: Bool { state.withLock { $0.pid != 0 && $0.status == nil } }

    /// The exit status, or the signal that ended the child.
    var terminationStatus: Int32 {
        guard let status = state.withLock({ $0.status }) else { return 0 }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    var terminationReason: TerminationReason {
        (state.withLock { $0.status } ?? 0) & 0x7f == 0 ? .exit : .uncaughtSignal
    }

    /// Starts the child.
    func run() throws {
        guard let path = executableURL?.path else { throw AgentError("no executable") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let streams = [
            (Self.descriptor(standardInput, childReads: true), Int32(0)),
            (Self.descriptor(standardOutput, childReads: false), Int32(1)),
            (Self.descriptor(standardError, childReads: false), Int32(2)),
        ]
        for (descriptor, target) in streams {
            guard let descriptor else { continue }
            // `FileHandle.nullDevice` has no descriptor of its own (-1): the child gets /dev/null.
            let added =
                descriptor >= 0
                ? posix_spawn_file_actions_adddup2(&actions, descriptor, target)
                : posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_RDWR, 0)
            guard added == 0 else { throw AgentError("posix_spawn_file_actions for descriptor \(target): \(added)") }
        }
        guard Self.addCloseFrom(&actions, 3) == 0 else { throw AgentError("posix_spawn_file_actions_addclosefrom_np") }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        let argv = ([path] + arguments).map { strdup($0) }
        let environment = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") }
        defer { for pointer in argv + environment { free(pointer) } }
        var pid: pid_t = 0
        ended.enter()
        let spawned = (argv + [nil]).withUnsafeBufferPointer { argv in
            (environment + [nil]).withUnsafeBufferPointer { environment in
                posix_spawn(
                    &pid,
                    path,
                    &actions,
                    &attributes,
                    UnsafeMutablePointer(mutating: argv.baseAddress!),
                    UnsafeMutablePointer(mutating: environment.baseAddress!)
                )
            }
        }
        guard spawned == 0 else {
            ended.leave()
            throw AgentError("posix_spawn \(path): \(String(cString: strerror(spawned)))")
        }
        state.withLock { $0.pid = pid }
        // As Process does: the parent's copy of the child's end of each pipe is closed, so the
        // parent sees the end of the child's output once the child has gone.
        if let pipe = standardInput as? Pipe { try? pipe.fileHandleForReading.close() }
        if let pipe = standardOutput as? Pipe { try? pipe.fileHandleForWriting.close() }
        if let pipe = standardError as? Pipe, pipe !== standardOutput as? Pipe {
            try? pipe.fileHandleForWriting.close()
        }
        let child = pid
        Thread.detachNewThread { [self] in
            var status: Int32 = 0
            while waitpid(child, &status, 0) == -1, errno == EINTR {}
            state.withLock { $0.status = status }
            ended.leave()
        }
    }

    /// Sends SIGTERM, if the child still runs.
    func terminate() {
        if isRunning { kill(processIdentifier, SIGTERM) }
    }

    /// Blocks until the child has ended and been reaped: call it off the concurrency pool.
    func waitUntilExit() {
        guard processIdentifier != 0 else { return }
        ended.wait()
    }

    private static func descriptor(_ stream: Any?, childReads: Bool) -> Int32? {
        switch stream {
        case let handle as FileHandle: return handle.fileDescriptor
        case let pipe as Pipe:
            return childReads ? pipe.fileHandleForReading.fileDescriptor : pipe.fileHandleForWriting.fileDescriptor
        default: return nil
        }
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later), which Swift's Glibc
    /// module does not declare: the child closes every descriptor from 3 up.
    private static let addCloseFrom: AddCloseFrom = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("glibc 2.34 or later is needed (posix_spawn_file_actions_addclosefrom_np)")
        }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()
}
