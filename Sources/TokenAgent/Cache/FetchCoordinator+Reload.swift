// Reloads: new providers and policy put in force, under the coordinator's lock, in itself and in
// every store shard; providers no longer used are shut down once their last fetch ends.
extension FetchCoordinator {
    /// Swaps in new providers and policy: kinds in `changedKinds`, added or removed move to a new
    /// generation (their fetches are cancelled and their entries forgotten, in the store too,
    /// under this lock); a provider no longer used is shut down once its last fetch ends.
    func reconfigure(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy,
        changedKinds: Set<String>,
        now: MonotonicInstant
    ) {
        metrics.prepare(kinds: providers.keys)
        let retired = state.withLock { state -> [RetiringProvider] in
            let previous = state.runtime
            var generations: [String: Int] = [:]
            var moved: Set<String> = []
            for kind in Set(providers.keys).union(previous.providers.keys) {
                if changedKinds.contains(kind) || providers[kind] == nil || previous.providers[kind] == nil {
                    moved.insert(kind)
                    if providers[kind] != nil {
                        generations[kind] = state.nextGeneration
                        state.nextGeneration += 1
                    }
                } else {
                    generations[kind] = previous.generations[kind] ?? 0
                }
            }
            let runtime = EngineRuntime(providers: providers, policy: policy, generations: generations)
            state.runtime = runtime
            // A kind keeps its lane while its provider does; a new or changed provider gets a
            // fresh one (the old provider's cancelled fetches may still hold places in the old).
            for kind in state.lanes.keys where providers[kind] == nil || moved.contains(kind) {
                state.lanes[kind] = nil
            }
            for kind in providers.keys where state.lanes[kind] == nil {
                state.lanes[kind] = AsyncLimiter(limit: limits.concurrentPerKind)
            }
            // A new provider starts with a clean record; a kind no longer configured has none.
            for kind in moved { state.health[kind] = nil }
            store.install(runtime, moved: moved, now: now)
            var orphaned: [Task<FetchedToken, any Error>] = []
            for (key, record) in state.flights where moved.contains(key.kind) {
                state.flights[key] = nil
                releaseQueued(record, key: key, in: &state)
                record.flight.task.cancel()
                orphaned.append(record.flight.task)
            }
            let kept = Set(providers.values.compactMap(Self.identity))
            var seen: Set<ObjectIdentifier> = []
            var retired: [RetiringProvider] = []
            for provider in previous.providers.values {
                guard let id = Self.identity(provider), !kept.contains(id), seen.insert(id).inserted else { continue }
                retired.append(RetiringProvider(provider: provider, flights: orphaned))
            }
            state.retiring += retired
            return retired
        }
        for retiring in retired {
            Task { [self] in
                for flight in retiring.flights { _ = await flight.result }
                await retiring.provider.shutdown()
                state.withLock { state in
                    state.retiring.removeAll { Self.identity($0.provider) == Self.identity(retiring.provider) }
                }
                logger.debug("retired provider shut down", metadata: ["provider": "\(retiring.provider.summary)"])
            }
        }
    }

    /// Providers replaced by a reload whose last fetches have not ended yet.
    var retiringProviders: Int { state.withLock { $0.retiring.count } }

    /// Every provider to shut down at exit: those in force and those still retiring.
    var allProviders: [any TokenProvider] {
        state.withLock { state in Array(state.runtime.providers.values) + state.retiring.map(\.provider) }
    }

    /// The identity of a provider that is an object (HTTP providers); `nil` for value types.
    static func identity(_ provider: any TokenProvider) -> ObjectIdentifier? {
        guard type(of: provider) is AnyClass else { return nil }
        return ObjectIdentifier(provider as AnyObject)
    }
}
