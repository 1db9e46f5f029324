import Synchronization

/// Says the agent is ready (systemd's READY=1) once every listener it was configured with
/// listens: the socket, and the metrics and metadata endpoints when they are set. A listener that
/// cannot listen (an address in use) stops the agent before that, so `systemctl start` fails
/// rather than a unit that started failing a moment later.
public final class ReadinessGate: Sendable {
    /// A listener the agent may wait for.
    public enum Listener: Hashable, Sendable {
        case socket, metrics, metadata
    }

    private let state: Mutex<(waiting: Set<Listener>, ready: (@Sendable () -> Void)?)>

    /// A gate that opens when each of `listeners` listens.
    public init(waitingFor listeners: Set<Listener>) {
        state = Mutex((listeners, nil))
    }

    /// What to do once every listener listens: set before the listeners start.
    public func whenReady(_ ready: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            state.ready = ready
            return state.waiting.isEmpty
        }
        if now { ready() }
    }

    /// `listener` listens; the last one runs ``whenReady(_:)``'s work, once.
    public func listening(_ listener: Listener) {
        let ready = state.withLock { state -> (@Sendable () -> Void)? in
            guard state.waiting.remove(listener) != nil, state.waiting.isEmpty else { return nil }
            return state.ready
        }
        ready?()
    }
}
