// What changes a shard's entries: a fetch's result recorded, an entry stored (within the store's
// bound), forgotten or touched.
import TokenWire

extension StoreShard {
    /// Stores what a fetch of `key` (an owned key) started in `generation` returned, unless the
    /// kind has moved on to a newer generation.
    mutating func record(
        _ key: EntryKey,
        generation: Int,
        result: Result<FetchedToken, ProviderError>,
        now: MonotonicInstant,
        unixNow: UnixTime,
        jitterUnit: Double
    ) -> RecordedFetch {
        guard runtime.generations[key.kind] == generation else { return .superseded }
        let policy = runtime.policy(for: key.kind)
        var result = result
        if case .success(let fetched) = result, !policy.isServable(remaining: fetched.expiresAt - unixNow) {
            result = .failure(.failed("token expires in under \(Int(policy.servingFloor)) s"))
        }
        var entry = table.peek(key) ?? CacheEntry(lastRead: now)
        let recorded: RecordedFetch
        switch result {
        case .success(let fetched):
            entry.hold(
                .owned(fetched.token),
                unixExpiry: fetched.expiresAt,
                remaining: fetched.expiresAt - unixNow,
                now: now,
                policy: policy,
                jitterUnit: jitterUnit
            )
            entry.failures = 0
            entry.retryAfter = .origin
            entry.rejectedUntil = .origin
            recorded = .stored(fetched)
            moveToStorage(&entry, key: key)
        case .failure(let error):
            entry.failures += 1
            entry.lastError = "\(error)"
            entry.lastErrorAt = now
            entry.lastErrorReason = FetchFailureReason(error)
            var backoff = policy.backoff(failures: entry.failures, jitterUnit: jitterUnit)
            switch error {
            case .rejected(let text):
                entry.rejectedUntil = now + policy.rejectionMemory
                entry.rejection = text
            case .throttled(_, let retryAfter), .misconfigured(_, let retryAfter):
                backoff = max(backoff, min(retryAfter, policy.retryAfterCap))
            case .failed:
                break
            }
            entry.retryAfter = now + backoff
            recorded = .failed(error)
        }
        store(key, entry, now: now)
        return recorded
    }

    /// Puts the token `entry` owns into the storage; when the storage takes it, the entry keeps no
    /// copy of its own.
    func moveToStorage(_ entry: inout CacheEntry, key: EntryKey) {
        guard case .owned(let token) = entry.token, let storage else { return }
        let held = storage.tokenStored(
            kind: key.kind,
            id: key.tokenKey.id,
            token: token,
            expiry: entry.expiry,
            lifetime: entry.lifetime,
            unixExpiry: entry.unixExpiry
        )
        if held { entry.token = .inStorage }
    }

    /// Inserts or replaces `key`'s entry and schedules its next look. A new key past the store's
    /// bound evicts the least recently used entry of the kind holding the most entries in this
    /// shard (its own kind when that is one of the largest): a kind flooded with new ids evicts
    /// its own entries, never those of a kind holding fewer.
    mutating func store(_ key: EntryKey, _ entry: CacheEntry, now: MonotonicInstant) {
        let group = self.group(of: key.kind)
        if table.slot(of: key) == nil, !budget.claim() {
            // At the bound: the largest kind's least recently used entry makes room (an empty
            // shard goes one over rather than evict from another shard under its lock).
            if let largest = table.largestGroup(preferring: group), let victim = table.oldestKey(inGroup: largest) {
                table.remove(victim)
                evictions += 1
                storage?.tokenRemoved(kind: victim.kind, id: victim.tokenKey.id)
            } else {
                budget.forceClaim()
            }
        }
        table.set(key, entry, capacity: .max, group: group)
        if let slot = table.slot(of: key) { schedule(slot: slot, at: nextCheck(entry, kind: key.kind, now: now)) }
    }

    /// Removes `key`'s entry, giving its place in the bound back.
    mutating func forget(_ key: EntryKey) {
        guard let entry = table.remove(key) else { return }
        budget.release()
        if entry.token.isHeld, let storage { storage.tokenRemoved(kind: key.kind, id: key.tokenKey.id) }
    }

    /// Marks the cached ones of `keys` (with their hashes) as read at `now` (TOUCH: keys read
    /// through shared memory). Never creates an entry. Returns how many were cached.
    mutating func touch(_ keys: [(key: EntryKey, hash: Int)], now: MonotonicInstant) -> Int {
        var touched = 0
        for (key, hash) in keys {
            guard let slot = table.slot(of: key, hashValue: hash) else { continue }
            let reactivated = table.update(slot: slot, touch: true) { entry -> Bool in
                let idle = !runtime.policy(for: key.kind).isActive(lastRead: entry.lastRead, now: now)
                entry.lastRead = now
                return idle
            }!
            if reactivated { schedule(slot: slot, at: now) }
            touched += 1
        }
        return touched
    }
}
