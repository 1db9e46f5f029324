import TokenWire

/// One shard of the token store: its entries in use order, its due queue, and its counters.
/// Every method runs under the shard's lock; none waits or allocates on a cache hit.
///
/// This file holds the shard's state, its decisions on requests and what it tells about its
/// entries; what a fetch brings and the other changes to entries are in `StoreShard+Records.swift`,
/// the due queue and reloads in `StoreShard+Scheduler.swift`.
struct StoreShard {
    var runtime: EngineRuntime
    var table: LRUTable<EntryKey, CacheEntry>
    var due = DueQueue()
    /// The entries held across all shards, against the store's bound.
    let budget: EntryBudget
    /// Told of every change to the servable tokens (the shared-memory segments), if any.
    let storage: (any TokenStorage)?
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
        self.storage = storage
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
        guard runtime.isConfigured(key.kind) else { return .fail(runtime.unknownKind(key.kind)) }
        let policy = runtime.policy(for: key.kind)
        guard let slot = table.slot(of: key, hashValue: hash) else {
            if request.isGet { misses += 1 }
            fetched = .origin
            return .fetch
        }
        let storage = self.storage
        var reactivated = false
        let decision = table.update(slot: slot, touch: true) { entry -> StoreDecision in
            // The token's lines start loading now, and arrive while the request is decided.
            if entry.storageHint != 0 { storage?.prefetch(hint: entry.storageHint) }
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
        storage: (any TokenStorage)?
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
        storage: (any TokenStorage)?,
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
            return key.withIDBytes { id in
                storage.withToken(kind: key.kind, id: id, hint: &entry.storageHint) {
                    serve(TokenView(bytes: $0, expiresAt: expiresAt, owned: nil))
                }
            }
        case .none, .unservable: return false
        }
    }

    /// Hands `entry`'s token to `body` as it is held (the storage's bytes, valid during the call);
    /// `false`, with `body` not called, when it has none to give.
    func withToken(_ entry: CacheEntry, key: EntryKey, _ body: (TokenView) -> Void) -> Bool {
        var entry = entry
        return Self.hand(&entry, key: key, storage: storage, to: body)
    }

    /// `entry`'s token as a `String` of its own (a copy when the storage holds it); `nil` when it
    /// has none to give.
    func tokenText(_ entry: CacheEntry, key: EntryKey) -> String? {
        var text: String?
        var entry = entry
        _ = Self.hand(&entry, key: key, storage: storage) { text = $0.served.token }
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
        let storage = self.storage
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
        _ = Self.hand(&entry, key: key, storage: storage) { served = $0.served }
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
        _ = Self.hand(&entry, key: key, storage: storage) { fingerprint = TokenFingerprint.of(bytes: $0.bytes) }
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
