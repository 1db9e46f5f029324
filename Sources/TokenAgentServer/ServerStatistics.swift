import Synchronization

/// Counters of the socket server, shared by every connection.
public final class ServerStatistics: Sendable {
    private let open = Atomic<Int>(0)
    private let accepted = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)

    /// Creates zeroed counters.
    public init() {}

    /// Connections open now.
    public var openConnections: Int { open.load(ordering: .relaxed) }
    /// Connections accepted since start.
    public var acceptedConnections: Int { accepted.load(ordering: .relaxed) }
    /// Connections refused because the limit was reached.
    public var refusedConnections: Int { refused.load(ordering: .relaxed) }

    /// Counts a new connection if fewer than `limit` are open; returns whether it may stay.
    func admit(limit: Int) -> Bool {
        let now = open.add(1, ordering: .relaxed).newValue
        if now > limit {
            open.subtract(1, ordering: .relaxed)
            refused.add(1, ordering: .relaxed)
            return false
        }
        accepted.add(1, ordering: .relaxed)
        return true
    }

    /// Counts a connection that closed after ``admit(limit:)`` let it in.
    func release() {
        open.subtract(1, ordering: .relaxed)
    }
}
