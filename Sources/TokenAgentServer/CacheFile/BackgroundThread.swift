import CSocketLoop
import TokenWire

/// Runs work on a thread of its own, which the work hands to the cores' idle time once it has
/// done what must not wait (``yieldToOthers()``).
///
/// A periodic cache snapshot's copy out of the store takes the locks a socket GET takes too, so
/// it runs at the agent's own priority (paced, ``SnapshotPacing``): a thread preempted while it
/// holds one would hold up the GETs that wait for it. What follows (each destination's commit: a
/// sync, and a rename that frees the old file's pages in one go) holds no lock, and runs only when
/// no other thread wants the core: a socket loop that wakes takes the core from it at once, where
/// a thread at a lower nice value would keep the core to the end of its time slice.
enum BackgroundThread {
    /// How much lower than the agent's the thread's nice value goes where the system refuses the
    /// idle policy: nice 10 has about a tenth of the CPU weight of nice 0.
    static let fallbackNiceness: Int32 = 10

    /// Runs `body` on a new thread at the calling process's priority, and returns its result;
    /// `nil`, with `body` not run, when the system refused a thread.
    static func run<Value: Sendable>(_ body: @escaping @Sendable () -> Value) async -> Value? {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value?, Never>) in
            let started = DetachedThread.start { continuation.resume(returning: body()) }
            if !started { continuation.resume(returning: nil) }
        }
    }

    /// How the calling thread runs from now on: ``Scheduling/idle`` (SCHED_IDLE), else
    /// ``Scheduling/niced`` (``fallbackNiceness`` lower), else ``Scheduling/unchanged``. For good:
    /// an unprivileged thread cannot take back either, so only a thread of ``run(_:)`` calls it.
    @discardableResult
    static func yieldToOthers() -> Scheduling {
        switch fsl_thread_run_when_idle(fallbackNiceness) {
        case 1: return .idle
        case 2: return .niced
        default: return .unchanged
        }
    }

    /// What ``yieldToOthers()`` did.
    enum Scheduling: Equatable {
        case idle, niced, unchanged
    }
}
