#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A thread of its own, for work that blocks (a reader waiting in `read`, a loop waiting in
/// `epoll_wait`) or must not wait behind whatever else Swift concurrency's pool runs: the one
/// place the agent and the client start one.
///
/// The thread is a detached POSIX thread with the system's default attributes (stack size,
/// scheduling); it ends when `body` returns. It keeps the name it inherits: a thread that wants
/// its own names itself from inside.
public enum DetachedThread {
    /// Starts `body` on a new thread. Returns `false`, and never runs `body`, when the system
    /// refuses a thread (`pthread_create` fails: out of memory or over the process's limit).
    @discardableResult
    public static func start(_ body: @escaping @Sendable () -> Void) -> Bool {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
        #if canImport(Glibc)
            var thread = pthread_t()
        #else
            var thread: pthread_t?
        #endif
        let result = pthread_create(
            &thread,
            &attributes,
            { context in
                #if canImport(Glibc)
                    let context = context!
                #endif
                Unmanaged<Body>.fromOpaque(context).takeRetainedValue().run()
                return nil
            },
            context
        )
        guard result == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return false
        }
        return true
    }

    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }
}
