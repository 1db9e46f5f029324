import CSocketLoop
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Runs work on a thread of its own at a lower CPU priority (nice 10), so that on a busy host the
/// socket loops, at the agent's own priority, get the cores first: a periodic cache snapshot of
/// 100,000 tokens is half a second of one core, and it can wait; a GET cannot.
enum BackgroundThread {
    /// How much lower than the agent's the thread's priority is: nice 10 has about a tenth of the
    /// CPU weight of nice 0 under Linux's scheduler when both want a core, and all of the core
    /// when nothing else does.
    static let niceness: Int32 = 10

    /// Runs `body` on a new thread whose priority is lowered by ``niceness`` (per thread: the
    /// rest of the process keeps its own), and returns its result; `nil`, with `body` not run,
    /// when the system refused a thread.
    static func run<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
            let started = DetachedThread.start {
                lowerPriority()
                continuation.resume(returning: body())
            }
            if !started { continuation.resume(returning: nil) }
        }
    }

    /// Lowers the calling thread's priority (Linux's `setpriority` on a thread id sets that
    /// thread's alone). Lowering needs no privilege; a failure leaves the priority as it was.
    private static func lowerPriority() {
        #if canImport(Glibc)
            let thread = id_t(fsl_thread_id())
            errno = 0
            let current = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), thread)
            guard errno == 0 else { return }
            _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), thread, min(19, current + niceness))
        #endif
    }
}
