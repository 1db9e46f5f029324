import Synchronization

/// The client's connections to the agent: hands out an open one, connecting (outside any lock)
/// when a slot has none; concurrent callers of an empty slot wait for the one connecting.
final class ConnectionPool: Sendable {
    private typealias Waiter = UnsafeContinuation<Result<AgentConnection, ConnectionLost>?, Never>

    private enum Slot {
        case empty
        case connecting([Waiter])
        case open(AgentConnection)
    }

    private struct State {
        var slots: [Slot]
        var next = 0
    }

    private enum Step {
        case use(AgentConnection)
        case connect(Int)
        case wait(Int)
    }

    /// The agent's socket path.
    let path: String
    private let state: Mutex<State>

    /// A pool of `count` connections (at least one) to the agent at `path`.
    init(path: String, count: Int) {
        self.path = path
        self.state = Mutex(State(slots: Array(repeating: .empty, count: max(1, count))))
    }

    /// An open connection, in turn; connects when the slot has none.
    nonisolated(nonsending) func connection() async throws(ConnectionLost) -> AgentConnection {
        while true {
            let step = state.withLock { state -> Step in
                let index = state.slots.count == 1 ? 0 : state.next % state.slots.count
                state.next &+= 1
                switch state.slots[index] {
                case .open(let connection) where connection.isOpen: return .use(connection)
                case .connecting: return .wait(index)
                case .open, .empty:
                    state.slots[index] = .connecting([])
                    return .connect(index)
                }
            }
            switch step {
            case .use(let connection):
                return connection
            case .connect(let index):
                return try connect(index).get()
            case .wait(let index):
                if let result = await wait(for: index) { return try result.get() }
            }
        }
    }

    /// Forgets connections that closed or were retired.
    func discardClosed() {
        state.withLock { state in
            for index in state.slots.indices {
                if case .open(let connection) = state.slots[index], !connection.isOpen { state.slots[index] = .empty }
            }
        }
    }

    /// Closes every connection.
    func shutdown() {
        let open = state.withLock { state in
            state.slots.compactMap { slot -> AgentConnection? in
                if case .open(let connection) = slot { return connection }
                return nil
            }
        }
        for connection in open { connection.shutdown() }
    }

    private func connect(_ index: Int) -> Result<AgentConnection, ConnectionLost> {
        let result = Result { () throws(ConnectionLost) in try AgentConnection(path: path) }
        let waiters = state.withLock { state -> [Waiter] in
            guard case .connecting(let waiters) = state.slots[index] else { return [] }
            if case .success(let connection) = result {
                state.slots[index] = .open(connection)
            } else {
                state.slots[index] = .empty
            }
            return waiters
        }
        for waiter in waiters { waiter.resume(returning: result) }
        return result
    }

    /// The outcome of the connect in progress for slot `index`; `nil` when it already finished.
    private nonisolated(nonsending) func wait(for index: Int) async -> Result<AgentConnection, ConnectionLost>? {
        await withUnsafeContinuation { continuation in
            let waiting = state.withLock { state -> Bool in
                guard case .connecting(var waiters) = state.slots[index] else { return false }
                waiters.append(continuation)
                state.slots[index] = .connecting(waiters)
                return true
            }
            if !waiting { continuation.resume(returning: nil) }
        }
    }
}
