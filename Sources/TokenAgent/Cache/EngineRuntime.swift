/// What a reload may change, as one immutable value: the providers, the policy, and the
/// generation of each kind. The fetch coordinator and every store shard hold the one in force;
/// a reload installs a new one in all of them under the coordinator's lock.
final class EngineRuntime: Sendable {
    /// The provider of each configured kind.
    let providers: [String: any TokenProvider]
    /// The refresh policy.
    let policy: RefreshPolicy
    /// Each kind's generation, raised when a reload changes the kind's provider.
    let generations: [String: Int]
    /// The configured kinds, sorted.
    let kinds: [String]
    /// The policy of each kind whose provider asks a serving floor above the policy's
    /// (``TokenProvider/servingFloor``: access tokens); every other kind has ``policy``.
    private let raisedFloors: [(kind: String, policy: RefreshPolicy)]
    /// The kinds whose tokens stay in memory (``TokenProvider/tokensStayInMemory``: access
    /// tokens), sorted: never exported to, nor imported from, ``TokenCacheMedium/disk``.
    let inMemoryKinds: [String]

    init(providers: [String: any TokenProvider], policy: RefreshPolicy, generations: [String: Int]) {
        self.providers = providers
        self.policy = policy
        self.generations = generations
        self.kinds = providers.keys.sorted()
        raisedFloors = providers.compactMap { kind, provider in
            guard let floor = provider.servingFloor, floor > policy.servingFloor else { return nil }
            return (kind, policy.raisingServingFloor(to: floor))
        }
        inMemoryKinds = providers.filter { $0.value.tokensStayInMemory }.keys.sorted()
    }

    /// Whether `kind`'s tokens may go to, or come from, `medium`: to ``TokenCacheMedium/memory``
    /// every kind's; to ``TokenCacheMedium/disk`` all but those of the kinds whose tokens stay in
    /// memory. With no such kind configured, this costs a test of an empty array.
    @inline(__always)
    func keeps(_ kind: String, on medium: TokenCacheMedium) -> Bool {
        switch medium {
        case .memory: return true
        case .disk: return inMemoryKinds.isEmpty || inMemoryKinds.first(named: kind, by: { $0 }) == nil
        }
    }

    /// The policy of `kind`: ``policy``, or its own when its provider raises the serving floor.
    /// With no such kind configured, this costs a test of an empty array.
    @inline(__always)
    func policy(for kind: String) -> RefreshPolicy {
        if raisedFloors.isEmpty { return policy }
        return raisedFloors.first(named: kind, by: \.kind)?.policy ?? policy
    }

    /// Whether `kind` is configured: a scan of the few kinds, which on the hit path costs less
    /// than hashing the name for `providers`.
    func isConfigured(_ kind: String) -> Bool { kinds.first(named: kind, by: { $0 }) != nil }

    /// The `unknownKind` failure for `kind`.
    func unknownKind(_ kind: String) -> EngineFailure { .unknownKind(kind, configured: kinds) }
}

/// A request as the engine decides it.
enum EngineRequest: Sendable {
    /// GET, with the minimum validity asked for (the policy's default when `nil`).
    case get(requested: Double?)
    /// REFRESH, naming the token the caller was refused, if it did.
    case refresh(refused: String?)
    /// WARM: decided like a default GET (served means "cached"), marks the entry read, but counts
    /// as neither a hit nor a miss, nor as a read of the token.
    case warm

    var isGet: Bool {
        if case .get = self { return true }
        return false
    }
}

/// What the store decided for a request.
enum StoreDecision {
    /// Answer with the cached token now: it was handed to the caller's `serve` under the lock.
    case served
    /// Answer with this failure now.
    case fail(EngineFailure)
    /// Fetch (or join the fetch in flight).
    case fetch
    /// Join the fetch in flight, if there is one; otherwise answer with this failure (a reported
    /// token whose one replacement fetch of the re-fetch guard window has already been made).
    case joinOrFail(EngineFailure)
}

/// What became of a fetch's result.
enum RecordedFetch {
    /// Stored: the token is cached.
    case stored(FetchedToken)
    /// The provider failed; the failure is remembered (back-off, refusal).
    case failed(ProviderError)
    /// The kind moved to a new generation while the fetch ran: nothing was stored.
    case superseded
}
