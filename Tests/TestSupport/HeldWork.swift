import Synchronization

/// Work a test fake holds back for as long as the test needs, with no window a loaded machine can
/// miss: between ``hold()`` and ``release()``, what comes is held, then all of it goes at once.
/// A fake provider's fetches and a fake server's replies are held so.
public final class HeldWork: Sendable {
    private struct State {
        var holding = false
        var held: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())

    public init() {}

    /// How much is held now.
    public var count: Int { state.withLock { $0.held.count } }

    /// From now on, holds what comes.
    public func hold() { state.withLock { $0.holding = true } }

    /// Lets everything held go, in the order it came, and holds no more.
    public func release() {
        let held = state.withLock { state in
            state.holding = false
            defer { state.held = [] }
            return state.held
        }
        for work in held { work() }
    }

    /// Holds `work` while holding (`true`); `false` when it should go now.
    public func hold(_ work: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { state in
            guard state.holding else { return false }
            state.held.append(work)
            return true
        }
    }

    /// Returns at once, or, while holding, when released.
    public func pass() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            if !hold({ continuation.resume() }) { continuation.resume() }
        }
    }
}
