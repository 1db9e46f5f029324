import Synchronization

/// Counters of the socket server, shared by every connection.
public final class ServerStatistics: Sendable {
    private let open = Atomic<Int>(0)
    private let accepted = Atomic<Int>(0)
    private let refused = Atomic<Int>(0)
    private let touches = Atomic<Int>(0)
    private let perUID = Mutex<[UInt32: Int]>([:])

    /// Creates zeroed counters.
    public init() {}

    /// Connections open now.
    public var openConnections: Int { open.load(ordering: .relaxed) }
    /// Connections accepted since start.
    public var acceptedConnections: Int { accepted.load(ordering: .relaxed) }
    /// Connections refused because the limit was reached.
    public var refusedConnections: Int { refused.load(ordering: .relaxed) }

    /// TOUCH lines counted (keys reported read through shared memory).
    public var touchRequests: Int { touches.load(ordering: .relaxed) }

    func countTouch() { touches.add(1, ordering: .relaxed) }

    /// Whether a new connection may stay.
    enum Admission: Equatable {
        case admitted
        case tooManyConnections
        case tooManyForUID(UInt32)
    }

    /// Counts a new connection if fewer than `limit` are open and, with a `perUIDLimit` above 0,
    /// fewer than that many belong to `uid`.
    func admit(limit: Int, uid: UInt32?, perUIDLimit: Int) -> Admission {
        let now = open.add(1, ordering: .relaxed).newValue
        if now > limit {
            open.subtract(1, ordering: .relaxed)
            refused.add(1, ordering: .relaxed)
            return .tooManyConnections
        }
        if let uid {
            let admitted = perUID.withLock { counts in
                let held = counts[uid, default: 0]
                if perUIDLimit > 0, held >= perUIDLimit { return false }
                counts[uid] = held + 1
                return true
            }
            if !admitted {
                open.subtract(1, ordering: .relaxed)
                refused.add(1, ordering: .relaxed)
                return .tooManyForUID(uid)
            }
        }
        accepted.add(1, ordering: .relaxed)
        return .admitted
    }

    /// Counts a connection that closed after ``admit(limit:uid:perUIDLimit:)`` let it in.
    func release(uid: UInt32?) {
        open.subtract(1, ordering: .relaxed)
        guard let uid else { return }
        perUID.withLock { counts in
            let held = counts[uid, default: 1] - 1
            counts[uid] = held > 0 ? held : nil
        }
    }

    /// Connections open now for `uid`.
    func openConnections(uid: UInt32) -> Int { perUID.withLock { $0[uid, default: 0] } }
}
