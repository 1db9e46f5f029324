import Synchronization
import TokenAgent

/// The host's credentials in force (its Application Default Credentials, federated or not),
/// which key-less issuers, host access tokens and the metadata endpoint share: what STATS'
/// `host_identity` and `status` name, and whose federation counts the metrics export. A reload
/// that changes them sets the new ones.
public final class HostIdentity: Sendable {
    private let state: Mutex<State>

    private struct State {
        var source: (any AccessTokenSource)?
        /// The counts of the federated sources a reload retired, so the metrics never go back.
        var retired = FederationStatistics()
    }

    /// Holds `source`; `nil` when nothing the agent serves uses the host's credentials.
    public init(_ source: (any AccessTokenSource)?) {
        state = Mutex(State(source: source))
    }

    /// The credentials in force.
    public var current: (any AccessTokenSource)? { state.withLock { $0.source } }

    /// Puts `source` in force (the same source again changes nothing).
    public func set(_ source: (any AccessTokenSource)?) {
        state.withLock { state in
            guard let old = state.source, source.map({ $0 as AnyObject }) !== (old as AnyObject) else {
                state.source = source
                return
            }
            if let counts = old.federationStatistics { state.retired.add(counts) }
            state.source = source
        }
    }

    /// The federation counts since start, over every source the agent has had; `nil` while the
    /// agent never had a federated identity.
    public var federationTotals: FederationStatistics? {
        state.withLock { state in
            let current = state.source?.federationStatistics
            guard current != nil || state.retired != FederationStatistics() else { return nil }
            var totals = state.retired
            if let current { totals.add(current) }
            return totals
        }
    }
}

extension FederationStatistics {
    /// Adds `other`'s counts to these.
    mutating func add(_ other: FederationStatistics) {
        stsCalls += other.stsCalls
        stsBackoffs += other.stsBackoffs
        impersonationCalls += other.impersonationCalls
        stsFailures.merge(other.stsFailures, uniquingKeysWith: +)
        impersonationFailures.merge(other.impersonationFailures, uniquingKeysWith: +)
    }
}
