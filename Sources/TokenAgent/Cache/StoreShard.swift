import TokenWire

/// One shard of the token store: its entries in use order, its due queue, and its counters.
/// Every method runs under the shard's lock; none waits or allocates on a cache hit.
///
/// Its state, its decisions on requests and what it tells about its entries come first; then what
/// changes its entries (a fetch's result, a store, a touch); then its scheduler (the due queue and
/// reloads).
struct StoreShard {
    var runtime: EngineRuntime
    var table: LRUTable<EntryKey, CacheEntry>
    var due = DueQueue()
    /// The entries held across all shards, against the store's bound.
    let budget: EntryBudget
    /// Told of every change to the servable tokens (the shared-memory segments), if any.
    var storage: (any TokenStorage)? { storageBox?.storage }
    /// The storage, boxed so that a request's decision can borrow it rather than retain it (an
    /// existential cannot be held unretained): `storageBox` holds it as long as the shard lives,
    /// `borrowedStorage` lends it.
    private let storageBox: StorageBox?
    private let borrowedStorage: Unmanaged<StorageBox>?

    /// A reference to the storage that can be borrowed through `Unmanaged` (an existential
    /// cannot be).
    final class StorageBox: Sendable {
        let storage: any TokenStorage
        init(_ storage: any TokenStorage) { self.storage = storage }
    }
    var hits = 0
    var misses = 0
    var servedAfterFailure = 0
    /// Entries the scheduler looked at.
    var examined = 0
    /// Entries evicted to stay within the store's bound.
    var evictions = 0
    /// Each kind's group in the table: its own use order, so eviction can pick a kind.
    private var groups: [String: Int] = [:]

    init(runtime: EngineRuntime, budget: EntryBudget, expectedCount: Int, storage: (any TokenStorage)? = nil) {
        self.runtime = runtime
        self.budget = budget
        storageBox = storage.map(StorageBox.init)
        borrowedStorage = storageBox.map { Unmanaged.passUnretained($0) }
        self.table = LRUTable(expectedCount: expectedCount)
    }

    /// The table group of `kind`, given the next number the first time it is seen.
    mutating func group(of kind: String) -> Int {
        if let group = groups[kind] { return group }
        let group = groups.count
        groups[kind] = group
        return group
    }

    // MARK: Requests

    /// Decides a request on `key` at `now`: serve (the token handed to `serve`, under the lock),
    /// fail, or fetch. `fetched` is set to when the entry's token was fetched (`.origin` when
    /// there is none), for ``fetchedAt(_:hash:)`` to tell whether a fetch ended since.
    mutating func decide(
        _ key: EntryKey,
        hash: Int,
        _ request: EngineRequest,
        now: MonotonicInstant,
        wall: UnixTime,
        fetched: inout MonotonicInstant,
        serve: (TokenView) -> Void
    ) -> StoreDecision {
        // Every entry's kind is configured in the shard's runtime: entries are made only for
        // such kinds (a fetch's result is recorded under its kind's generation, a token taken
        // only for a kind with a provider), and a reload's `install` forgets the entries of a
        // kind it removes. So only a key not found needs its kind checked.
        guard let slot = table.slot(of: key, hashValue: hash) else {
            guard runtime.isConfigured(key.kind) else { return .fail(runtime.unknownKind(key.kind)) }
            if request.isGet { misses += 1 }
            fetched = .origin
            return .fetch
        }
        assert(runtime.isConfigured(key.kind), "an entry of \(key.kind), a kind not configured")
        let policy = runtime.policy(for: key.kind)
        let storage = borrowedStorage
        var reactivated = false
        let decision = table.update(slot: slot, touch: true) { entry -> StoreDecision in
            // The token's lines start loading now, and arrive while the request is decided.
            if entry.storageHint != 0 {
                storage?._withUnsafeGuaranteedRef { $0.storage.prefetch(hint: entry.storageHint) }
            }
            fetched = entry.fetchedAt
            reactivated = !policy.isActive(lastRead: entry.lastRead, now: now)
            entry.lastRead = now
            if request.isGet { entry.reads &+= 1 }
            var decision: StoreDecision
            switch request {
            case .get(let requested):
                decision = Self.decideGet(&entry, requested: requested, policy: policy, now: now, wall: wall)
            case .warm: decision = Self.decideGet(&entry, requested: nil, policy: policy, now: now, wall: wall)
            case .refresh(let refused):
                if let refused, Self.holds(&entry, refused, key: key, storage: storage) {
                    decision = Self.decideReport(&entry, policy: policy, now: now)
                } else {
                    decision = Self.decideRefresh(entry, refused: refused, policy: policy, now: now, wall: wall)
                }
            }
            if case .served = decision, !Self.hand(&entry, key: key, storage: storage, to: serve) {
                // The storage let it go (it stopped being servable at this very instant): a miss.
                entry.token = .none
                decision = Self.holdOff(entry, now: now).map(StoreDecision.fail) ?? .fetch
            }
            return decision
        }!
        // An idle entry read again earns refreshes again: look at it now.
        if reactivated { schedule(slot: slot, at: now) }
        if request.isGet {
            if case .fetch = decision { misses += 1 } else if case .served = decision { hits += 1 }
        }
        return decision
    }

    /// When the token of `key` was fetched; `.origin` when it has none. Never touches the entry.
    func fetchedAt(_ key: EntryKey, hash: Int) -> MonotonicInstant {
        guard let slot = table.slot(of: key, hashValue: hash) else { return .origin }
        return table.entry(inSlot: slot)?.value.fetchedAt ?? .origin
    }

    /// A GET on an existing entry: ``StoreDecision/served`` means "serve the entry's token".
    private static func decideGet(
        _ entry: inout CacheEntry,
        requested: Double?,
        policy: RefreshPolicy,
        now: MonotonicInstant,
        wall: UnixTime
    ) -> StoreDecision {
        let remaining = entry.remaining(at: now, wall: wall)
        let servable = policy.isServable(remaining: remaining)
        if entry.token.isHeld {
            let needed = policy.requiredValidity(lifetime: entry.lifetime, requested: requested)
            if remaining >= needed || (servable && now - entry.fetchedAt < policy.refetchGuard) {
                return .served
            }
        }
        if let failure = holdOff(entry, now: now) {
            return servable ? .served : .fail(failure)
        }
        return .fetch
    }

    /// A REFRESH on an existing entry that does not hold the refused token, if one is named.
    /// Without a refused token: a fetch unless the token was fetched within the re-fetch guard.
    /// With one (the cached token is another, newer one): that token; a fetch if there is none.
    private static func decideRefresh(
        _ entry: CacheEntry,
        refused: String?,
        policy: RefreshPolicy,
        now: MonotonicInstant,
        wall: UnixTime
    ) -> StoreDecision {
        let servable = entry.token.isHeld && policy.isServable(remaining: entry.remaining(at: now, wall: wall))
        if refused != nil {
            if servable { return .served }
        } else if servable, now - entry.fetchedAt < policy.refetchGuard {
            return .served
        }
        return holdOff(entry, now: now).map(StoreDecision.fail) ?? .fetch
    }

    /// A REFRESH reporting the cached token refused. The token stays cached and served to every
    /// GET until its replacement arrives (a report never empties the key); the reporter waits for
    /// the replacement fetch, of which there is at most one per re-fetch guard window, whoever
    /// reports: a later report joins it while it runs, and is refused once it has ended.
    private static func decideReport(
        _ entry: inout CacheEntry,
        policy: RefreshPolicy,
        now: MonotonicInstant
    ) -> StoreDecision {
        if let failure = holdOff(entry, now: now) { return .fail(failure) }
        if entry.reportedAt != .origin, now - entry.reportedAt < policy.refetchGuard {
            let wait = Int(saturating: (policy.refetchGuard - (now - entry.reportedAt)).rounded(.up))
            return .joinOrFail(.reportedRecently(seconds: max(1, wait)))
        }
        entry.reportedAt = now
        return .fetch
    }

    /// Whether `entry` holds `token` (its bytes, wherever they are kept).
    private static func holds(
        _ entry: inout CacheEntry,
        _ token: String,
        key: EntryKey,
        storage: Unmanaged<StorageBox>?
    ) -> Bool {
        var equal = false
        return hand(&entry, key: key, storage: storage) { equal = $0.bytes.elementsEqual(token.utf8) } && equal
    }

    /// Hands `entry`'s token to `serve`; `false` when it has none to hand (the storage let it go).
    /// A token in storage is looked up with the entry's hint of where the storage keeps it, which
    /// the storage updates.
    private static func hand(
        _ entry: inout CacheEntry,
        key: EntryKey,
        storage: Unmanaged<StorageBox>?,
        to serve: (TokenView) -> Void
    ) -> Bool {
        let expiresAt = entry.unixExpiry.wholeSeconds
        switch entry.token {
        case .owned(let text):
            var bytes = text
            bytes.withUTF8 { serve(TokenView(bytes: UnsafeRawBufferPointer($0), expiresAt: expiresAt, owned: text)) }
            return true
        case .inStorage:
            guard let storage else { return false }
            // The storage is borrowed in the closure, not retained for it.
            return key.withIDBytes { id in
                storage._withUnsafeGuaranteedRef {
                    $0.storage.withToken(kind: key.kind, id: id, hint: &entry.storageHint) {
                        serve(TokenView(bytes: $0, expiresAt: expiresAt, owned: nil))
                    }
                }
            }
        case .none, .unservable: return false
        }
    }

    /// Hands `entry`'s token to `body` as it is held (the storage's bytes, valid during the call);
    /// `false`, with `body` not called, when it has none to give.
    func withToken(_ entry: CacheEntry, key: EntryKey, _ body: (TokenView) -> Void) -> Bool {
        var entry = entry
        return Self.hand(&entry, key: key, storage: borrowedStorage, to: body)
    }

    /// `entry`'s token as a `String` of its own (a copy when the storage holds it); `nil` when it
    /// has none to give.
    func tokenText(_ entry: CacheEntry, key: EntryKey) -> String? {
        var text: String?
        var entry = entry
        _ = Self.hand(&entry, key: key, storage: borrowedStorage) { text = $0.served.token }
        return text
    }

    /// Why no fetch may start for `entry` now: a refusal still remembered, or a back-off.
    private static func holdOff(_ entry: CacheEntry, now: MonotonicInstant) -> EngineFailure? {
        if now < entry.rejectedUntil { return .rejected(entry.rejection) }
        if now < entry.retryAfter {
            return .backingOff(seconds: Int(saturating: (entry.retryAfter - now).rounded(.up)))
        }
        return nil
    }

    /// See ``TokenStore/withdrawReport(_:refused:)``.
    mutating func withdrawReport(_ key: EntryKey, refused: String) {
        guard let slot = table.slot(of: key) else { return }
        let storage = borrowedStorage
        table.update(slot: slot) { entry in
            if Self.holds(&entry, refused, key: key, storage: storage) { entry.reportedAt = .origin }
        }
    }

    /// The cached token of `key` if it can still be served (a GET whose fetch failed).
    mutating func servableAfterFailure(_ key: EntryKey, now: MonotonicInstant, wall: UnixTime) -> ServedToken? {
        guard var entry = table.peek(key),
            runtime.policy(for: key.kind).isServable(remaining: entry.remaining(at: now, wall: wall))
        else {
            return nil
        }
        var served: ServedToken?
        _ = Self.hand(&entry, key: key, storage: borrowedStorage) { served = $0.served }
        if served != nil { servedAfterFailure += 1 }
        return served
    }

    // MARK: Inspection

    /// What `INFO` tells about `key` at `now` (`unixNow` on the wall clock), without touching it:
    /// `nil` when nothing is cached for it.
    func info(_ key: EntryKey, now: MonotonicInstant, unixNow: UnixTime) -> KeyInfo? {
        guard let entry = table.peek(key) else { return nil }
        func wall(_ instant: MonotonicInstant) -> UnixTime { unixNow + (instant - now) }
        var info = KeyInfo(lastReadAt: wall(entry.lastRead))
        if entry.token.isHeld {
            info.fingerprint = fingerprint(entry, key: key)
            info.fetchedAt = wall(entry.fetchedAt)
            info.expiresAt = entry.unixExpiry
            info.nextRefresh = wall(max(entry.refreshAt, entry.retryAfter, entry.rejectedUntil))
            info.readsSinceFetch = entry.reads
        }
        info.failures = entry.failures
        if !entry.lastError.isEmpty {
            info.lastError = entry.lastError
            info.lastErrorAt = wall(entry.lastErrorAt)
            info.lastErrorReason = entry.lastErrorReason
        }
        return info
    }

    /// The fingerprint of `entry`'s token; `nil` when it has none (or the storage let it go).
    func fingerprint(_ entry: CacheEntry, key: EntryKey) -> String? {
        if case .unservable(let fingerprint) = entry.token { return fingerprint }
        var fingerprint: String?
        var entry = entry
        _ = Self.hand(&entry, key: key, storage: borrowedStorage) { fingerprint = TokenFingerprint.of(bytes: $0.bytes) }
        return fingerprint
    }

    /// Adds this shard's entries to `surveys`, by kind: one walk of each kind's group in the
    /// table (for metrics and health; never on a request's path).
    func survey(into surveys: inout [String: KindSurvey], now: MonotonicInstant) {
        for (kind, group) in groups where table.count(inGroup: group) > 0 {
            let policy = runtime.policy(for: kind)
            var survey = KindSurvey(kind: kind)
            table.forEachValue(inGroup: group) { entry in
                survey.entries += 1
                guard entry.token.isHeld else { return }
                let remaining = entry.remaining(at: now)
                if policy.isServable(remaining: remaining) { survey.tokens += 1 }
                if policy.isActive(lastRead: entry.lastRead, now: now) {
                    survey.activeTokens += 1
                    survey.soonestActiveExpiry = min(survey.soonestActiveExpiry ?? .infinity, remaining)
                    if remaining < policy.requiredValidity(lifetime: entry.lifetime, requested: nil) {
                        survey.activeBelowMinimumValidity += 1
                    }
                }
            }
            surveys[kind, default: KindSurvey(kind: kind)].add(survey)
        }
    }
}

// MARK: What changes a shard's entries: a fetch's result recorded, an entry stored (within the store's
// bound), forgotten or touched.
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

// MARK: The shard's scheduler: when each entry is looked at next (its due queue), one pass over what is
// due, and a reload put in force.
extension StoreShard {
    /// When the entry in `slot` needs looking at next: a refresh falling due while it is read, the
    /// moment it turns idle, or, once idle, the moment it can be forgotten.
    func nextCheck(_ entry: CacheEntry, kind: String, now: MonotonicInstant) -> MonotonicInstant {
        let policy = runtime.policy(for: kind)
        let idleAt = entry.lastRead + policy.idleTimeout + 0.001
        if now < idleAt {
            guard entry.token.isHeld else { return idleAt }
            let next = min(idleAt, max(entry.refreshAt, entry.retryAfter, entry.rejectedUntil))
            // Also when it stops being servable: then it leaves shared memory.
            let unservableAt = entry.expiry - policy.servingFloor + 0.001
            return unservableAt > now ? min(next, unservableAt) : next
        }
        let unservableAt = !entry.token.isHeld ? now : entry.expiry - policy.servingFloor + 0.001
        return max(unservableAt, entry.retryAfter)
    }

    /// Makes sure the entry in `slot` is looked at no later than `at`.
    mutating func schedule(slot: Int, at: MonotonicInstant) {
        let current = table.update(slot: slot) { entry -> MonotonicInstant? in
            if entry.scheduled != .origin, entry.scheduled <= at { return entry.scheduled }
            entry.scheduled = at
            return nil
        }
        guard let current, current == nil else { return }
        due.push(at, slot: slot)
    }

    /// One scheduler pass at `now`: looks only at the entries whose record is due. Entries idle
    /// and no longer servable are forgotten; entries read within the idle time-out whose refresh
    /// is due are returned for a background refresh.
    mutating func takeDue(now: MonotonicInstant) -> [TokenKey] {
        if due.count > 2 * table.count + 1024 { rebuildDueQueue(at: now) }
        var records: [DueQueue.Record] = []
        while let record = due.popDue(at: now) { records.append(record) }
        var refresh: [TokenKey] = []
        for record in records {
            let slot = Int(record.slot)
            guard let (key, entry) = table.entry(inSlot: slot), entry.scheduled == record.at else { continue }
            let policy = runtime.policy(for: key.kind)
            table.update(slot: slot) { $0.scheduled = .origin }
            examined += 1
            let active = policy.isActive(lastRead: entry.lastRead, now: now)
            if entry.token.isHeld, !policy.isServable(remaining: entry.remaining(at: now)), let storage {
                // It leaves shared memory; the entry remembers only its fingerprint.
                if entry.token == .inStorage {
                    let fingerprint = fingerprint(entry, key: key) ?? "-"
                    table.update(slot: slot) { $0.token = .unservable(fingerprint: fingerprint) }
                }
                storage.tokenRemoved(kind: key.kind, id: key.tokenKey.id)
            }
            if !active, !policy.isServable(remaining: entry.remaining(at: now)), now >= entry.retryAfter {
                forget(key)
            } else if active, entry.token.isHeld, now >= entry.refreshAt, now >= entry.retryAfter,
                now >= entry.rejectedUntil
            {
                refresh.append(key.tokenKey)
                // Looked at again after the fetch is recorded, or in a second if none started.
                schedule(slot: slot, at: now + 1)
            } else {
                schedule(slot: slot, at: max(nextCheck(entry, kind: key.kind, now: now), now + 0.001))
            }
        }
        return refresh
    }

    /// After a step of the wall clock: each held token whose `exp`, by the wall clock `wall`,
    /// comes before its monotonic deadline has its whole timeline moved that much sooner (fetched,
    /// refresh, deadline: as if fetched that much earlier, so its lifetime, and with it the
    /// validity a GET needs, stays as issued), its shared-memory slot the new deadline (readers
    /// judge by it), and a look now (which starts its refresh, or takes it out of shared memory,
    /// when due). A step back moves nothing: a deadline never moves later. Returns how many moved.
    mutating func wallClockStepped(now: MonotonicInstant, wall: UnixTime) -> Int {
        var moved = 0
        for slot in table.slotsNewestFirst {
            guard let (key, entry) = table.entry(inSlot: slot), entry.token.isHeld else { continue }
            let byWall = now + (entry.unixExpiry - wall)
            guard byWall < entry.expiry else { continue }
            let sooner = entry.expiry - byWall
            var updated = entry
            updated.expiry = byWall
            updated.fetchedAt = updated.fetchedAt - sooner
            updated.refreshAt = updated.refreshAt - sooner
            if updated.token == .inStorage, let storage, let token = tokenText(entry, key: key) {
                let held = storage.tokenStored(
                    kind: key.kind,
                    id: key.tokenKey.id,
                    token: token,
                    expiry: updated.expiry,
                    lifetime: updated.lifetime,
                    unixExpiry: updated.unixExpiry
                )
                if !held { updated.token = .owned(token) }
            }
            table.update(slot: slot) { $0 = updated }
            schedule(slot: slot, at: now)
            moved += 1
        }
        return moved
    }

    /// Forgets every record and schedules every entry for `now`.
    mutating func rebuildDueQueue(at now: MonotonicInstant) {
        due.removeAll()
        for slot in table.slotsNewestFirst {
            table.update(slot: slot) { $0.scheduled = now }
            due.push(now, slot: slot)
        }
    }

    // MARK: Reload and hand-over

    /// Puts `runtime` in force, forgets the entries of the kinds in `moved`, and looks at every
    /// other entry at the next pass (the policy may have changed).
    mutating func install(_ runtime: EngineRuntime, moved: Set<String>, now: MonotonicInstant) {
        self.runtime = runtime
        if !moved.isEmpty {
            var gone: [EntryKey] = []
            table.forEachKey { key, _ in
                if moved.contains(key.kind) { gone.append(key) }
            }
            for key in gone { forget(key) }
        }
        rebuildDueQueue(at: now)
    }
}
