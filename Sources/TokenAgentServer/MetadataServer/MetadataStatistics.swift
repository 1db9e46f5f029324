import MetadataEndpoint
import Synchronization

/// What the GCE metadata endpoint answered, and what became of its connections, for `STATS` and
/// the metrics (read when they are asked for; the endpoint's own thread counts, never the
/// socket's).
public final class MetadataStatistics: Sendable {
    /// Why the endpoint closed a connection it had admitted, before the client did.
    public enum Closure: Int, CaseIterable, Sendable {
        /// Closed to make room for a new one: it was the oldest waiting for a request.
        case evicted
        /// Its request's head did not come whole within `headTimeout`.
        case headTimeout
        /// Nothing read or written for `idleTimeout`.
        case idleTimeout
        /// A request over `maxRequestBytes`.
        case tooLarge
        /// A request not whole within `requestTimeout` of its first byte.
        case requestTimeout

        /// Its name in STATS (after `metadata_`) and in the metrics' `reason` label.
        public var label: String {
            switch self {
            case .evicted: "evicted"
            case .headTimeout: "head_timeout"
            case .idleTimeout: "idle_timeout"
            case .tooLarge: "too_large"
            case .requestTimeout: "request_timeout"
            }
        }
    }

    /// The counts at one moment.
    public struct Counts: Sendable, Equatable {
        /// The address listened on: the configured one, with the port the system chose once bound.
        public var listen: MetadataListenAddress
        /// Answers written, by outcome (indexed by ``MetadataOutcome/rawValue``).
        public var answers = [Int](repeating: 0, count: MetadataOutcome.allCases.count)
        /// Connections open now.
        public var open = 0
        /// Connections admitted since start.
        public var accepted = 0
        /// Connections refused at `maxConnections`: every open one was being answered.
        public var refused = 0
        /// Admitted connections the endpoint closed, by why (indexed by ``Closure/rawValue``).
        public var closed = [Int](repeating: 0, count: Closure.allCases.count)

        /// The answers of `outcome`.
        public func answers(_ outcome: MetadataOutcome) -> Int { answers[outcome.rawValue] }

        /// The connections closed for `closure`.
        public func closed(_ closure: Closure) -> Int { closed[closure.rawValue] }
    }

    private let state: Mutex<Counts>

    /// Zeroed counts of an endpoint on `listen`.
    public init(listen: MetadataListenAddress) {
        state = Mutex(Counts(listen: listen))
    }

    /// The counts now.
    public var counts: Counts { state.withLock { $0 } }

    /// The listener is bound to `address`.
    func bound(_ address: MetadataListenAddress) { state.withLock { $0.listen = address } }

    /// An answer of `outcome` was written.
    func countAnswer(_ outcome: MetadataOutcome) { state.withLock { $0.answers[outcome.rawValue] += 1 } }

    /// A connection was admitted.
    func countAdmitted() {
        state.withLock { counts in
            counts.accepted += 1
            counts.open += 1
        }
    }

    /// A connection was refused at the cap.
    func countRefused() { state.withLock { $0.refused += 1 } }

    /// An admitted connection closed, whoever closed it.
    func countReleased() { state.withLock { $0.open -= 1 } }

    /// The endpoint closes an admitted connection for `closure`.
    func countClosed(_ closure: Closure) { state.withLock { $0.closed[closure.rawValue] += 1 } }
}
