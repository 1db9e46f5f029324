// WARM: fetches started ahead of need, at the lowest priority, that nobody waits for; and the
// signature budgets' counters.
extension FetchCoordinator {
    /// Starts `WARM` fetches of `keys` (all of one kind, none cached): a key with a fetch in
    /// flight is counted without a second fetch (and without joining it: nobody waits); any other
    /// gets a fetch of priority ``FetchPriority/warm`` owned by `owner`, while the kind's queue,
    /// its `WARM` half of it, `owner`'s first-fetch bound and `allowance` all have room. Keys past
    /// a bound are neither. Returns the keys now in flight and the fetches started.
    func warm(_ keys: [TokenKey], owner: UInt32?, allowance: WarmAllowance) -> (queued: Int, started: Int) {
        guard !keys.isEmpty else { return (0, 0) }
        return state.withLock { state in
            var queued = 0
            var started = 0
            for key in keys {
                if state.flights[key] != nil {
                    queued += 1
                    continue
                }
                guard state.lanes[key.kind] != nil,
                    state.queuedByKind[key.kind, default: 0] < limits.queuedPerKind,
                    state.queuedWarmByKind[key.kind, default: 0] < limits.warmQueuedPerKind,
                    owner.map({ state.queuedByOwner[$0, default: 0] < limits.queuedPerUID }) ?? true,
                    allowance.take()
                else { continue }
                guard start(key, owner: owner, priority: .warm, allowance: allowance, in: &state) != nil else {
                    allowance.giveBack()
                    continue
                }
                queued += 1
                started += 1
            }
            return (queued, started)
        }
    }

    /// The counters of the signature budget of every configured kind that has one, sorted by
    /// kind. Kinds that share a budget each show its counters.
    func signatureBudgets() -> [(kind: String, counters: SignatureBudget.Counters)] {
        let runtime = self.runtime
        return runtime.kinds.compactMap { kind in
            runtime.providers[kind]?.signatureBudget.map { (kind, $0.counters) }
        }
    }
}
