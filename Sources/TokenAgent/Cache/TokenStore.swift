import Synchronization
import TokenWire

/// The cached entries, split into shards by key, each under its own lock: a request takes one
/// shard's lock for one short, allocation-free decision, and the scheduler's pass takes each
/// shard's lock only for what is due in it. Nothing here waits for a provider.
///
/// The bound on entries is global (one atomic count); a new key past it evicts the least recently
/// used entry of its own shard, so eviction order is exact within a shard and approximate across
/// them. Small caches (under 8,192 entries) have one shard and an exact order.
final class TokenStore: Sendable {
    private final class Shard: Sendable {
        let state: Mutex<StoreShard>
        init(_ shard: sending StoreShard) { state = Mutex(shard) }
    }

    private let shards: [Shard]
    /// The same shards, borrowed by a request's decision rather than retained: `shards` holds
    /// them as long as the store lives.
    private let borrowedShards: [Unmanaged<Shard>]
    private let random: @Sendable () -> Double
    /// Where the shards keep their tokens (told ahead of a batch, ``take(_:now:unixNow:)``).
    private let storage: (any TokenStorage)?

    /// The most shards a store has.
    static let maxShards = 16

    init(
        runtime: EngineRuntime,
        maxEntries: Int,
        storage: (any TokenStorage)? = nil,
        random: @escaping @Sendable () -> Double
    ) {
        let count = max(1, min(Self.maxShards, maxEntries / 4096))
        let budget = EntryBudget(maxEntries: maxEntries)
        // Room for a fair share and a little more: keys do not spread exactly evenly.
        let expected = count == 1 ? maxEntries : maxEntries / count + maxEntries / count / 8
        self.shards = (0..<count).map { _ in
            Shard(StoreShard(runtime: runtime, budget: budget, expectedCount: expected, storage: storage))
        }
        self.borrowedShards = shards.map { Unmanaged.passUnretained($0) }
        self.random = random
        self.storage = storage
    }

    private func shard(_ key: EntryKey) -> Shard { shard(hashValue: key.tableHash) }

    private func shard(hashValue: Int) -> Shard { shards[shardIndex(hashValue: hashValue)] }

    private func shardIndex(hashValue: Int) -> Int {
        // The high 32 bits pick the shard, scaled to the count by a multiply rather than a
        // division's remainder; the table's index and tags use the low 32.
        let high = UInt64(UInt(bitPattern: hashValue) >> 32)
        return Int(truncatingIfNeeded: (high &* UInt64(shards.count)) >> 32)
    }

    /// Decides a request on `key` at `now`, hashing the key once for the shard and its table; a
    /// token served is handed to `serve` under the shard's lock.
    func decide(
        _ key: EntryKey,
        _ request: EngineRequest,
        now: MonotonicInstant,
        wall: UnixTime,
        fetched: inout MonotonicInstant,
        serve: (TokenView) -> Void
    ) -> StoreDecision {
        let hash = key.tableHash
        return borrowedShards[shardIndex(hashValue: hash)]._withUnsafeGuaranteedRef { shard in
            shard.state.withLock {
                $0.decide(key, hash: hash, request, now: now, wall: wall, fetched: &fetched, serve: serve)
            }
        }
    }

    /// When the token of `key` was fetched (`.origin`: none), never touching the entry.
    func fetchedAt(_ key: EntryKey) -> MonotonicInstant {
        let hash = key.tableHash
        return shard(hashValue: hash).state.withLock { $0.fetchedAt(key, hash: hash) }
    }

    /// Undoes a report's claim on its re-fetch guard window when its replacement fetch could not
    /// start (`busy`), if the cached token is still the reported one.
    func withdrawReport(_ key: EntryKey, refused: String) {
        shard(key).state.withLock { $0.withdrawReport(key, refused: refused) }
    }

    /// The cached token of `key` if it can still be served, counted as served after a failure.
    func servableAfterFailure(_ key: EntryKey, now: MonotonicInstant, wall: UnixTime) -> ServedToken? {
        shard(key).state.withLock { $0.servableAfterFailure(key, now: now, wall: wall) }
    }

    /// Stores a fetch's result (see ``StoreShard/record(_:generation:result:now:unixNow:jitterUnit:)``).
    func record(
        _ key: TokenKey,
        generation: Int,
        result: Result<FetchedToken, ProviderError>,
        now: MonotonicInstant,
        unixNow: UnixTime
    ) -> RecordedFetch {
        let entryKey = EntryKey(kind: key.kind, id: key.id)
        let jitter = random()
        return shard(entryKey).state.withLock {
            $0.record(entryKey, generation: generation, result: result, now: now, unixNow: unixNow, jitterUnit: jitter)
        }
    }

    /// Forgets `key`; `nil` when done, or the failure to answer when its kind is not configured.
    func drop(_ key: EntryKey) -> EngineFailure? {
        shard(key).state.withLock { shard in
            guard shard.runtime.providers[key.kind] != nil else { return shard.runtime.unknownKind(key.kind) }
            shard.forget(key)
            return nil
        }
    }

    /// Marks the cached keys among `ids` of `kind` as read (TOUCH); returns how many were cached.
    func touch(kind: String, ids: [String], now: MonotonicInstant) -> Int {
        // Each key hashed once: for its shard, and for its shard's table.
        var byShard: [Int: [(key: EntryKey, hash: Int)]] = [:]
        for id in ids {
            let key = EntryKey(kind: kind, id: id)
            let hash = key.tableHash
            byShard[shardIndex(hashValue: hash), default: []].append((key, hash))
        }
        var touched = 0
        for (index, keys) in byShard {
            touched += shards[index].state.withLock { $0.touch(keys, now: now) }
        }
        return touched
    }

    /// What `INFO` tells about `key`: `nil` when nothing is cached for it, a failure when its kind
    /// is not configured.
    func info(_ key: EntryKey, now: MonotonicInstant, unixNow: UnixTime) -> Result<KeyInfo?, EngineFailure> {
        shard(key).state.withLock { shard in
            guard shard.runtime.providers[key.kind] != nil else { return .failure(shard.runtime.unknownKind(key.kind)) }
            return .success(shard.info(key, now: now, unixNow: unixNow))
        }
    }

    /// The entries of every kind, surveyed at `now` (one walk of every shard, each under its lock).
    func survey(now: MonotonicInstant) -> [String: KindSurvey] {
        var surveys: [String: KindSurvey] = [:]
        for shard in shards { shard.state.withLock { $0.survey(into: &surveys, now: now) } }
        return surveys
    }

    /// One scheduler pass over every shard: the keys whose background refresh is due.
    func takeDue(now: MonotonicInstant) -> [TokenKey] {
        var due: [TokenKey] = []
        for shard in shards { due += shard.state.withLock { $0.takeDue(now: now) } }
        return due
    }

    /// After a step of the wall clock: moves each token's deadline to its `exp` by the wall clock
    /// `wall` where that comes sooner. Returns how many moved.
    func wallClockStepped(now: MonotonicInstant, wall: UnixTime) -> Int {
        shards.reduce(0) { moved, shard in moved + shard.state.withLock { $0.wallClockStepped(now: now, wall: wall) } }
    }

    /// Puts `runtime` in force in every shard (a reload) and forgets the kinds in `moved`.
    func install(_ runtime: EngineRuntime, moved: Set<String>, now: MonotonicInstant) {
        for shard in shards { shard.state.withLock { $0.install(runtime, moved: moved, now: now) } }
    }

    /// Adds the entries held and the counters of requests answered by the store to `stats`.
    func addCounts(to stats: inout EngineStatistics) {
        for shard in shards {
            shard.state.withLock { shard in
                stats.entries += shard.table.count
                stats.hits += shard.hits
                stats.misses += shard.misses
                stats.servedAfterFailure += shard.servedAfterFailure
                stats.scheduled += shard.due.count
                stats.examined += shard.examined
                stats.evictions += shard.evictions
            }
        }
    }

    /// What ``forEachServable(now:chunkSize:medium:_:)`` hands its visitor, chunk by chunk.
    enum ExportStep {
        /// A chunk is about to be copied; no lock is held yet.
        case chunkStarts
        /// A token of the chunk, under its shard's lock: its bytes are valid only during the call.
        case token(kind: String, id: String, view: TokenView)
        /// The chunk is copied and its shard's lock let go.
        case chunkEnds
    }

    /// Hands `visit` the tokens that can still be served at `now`, a chunk of at most `chunkSize`
    /// slots of one shard at a time: each chunk's tokens under its shard's lock, as they are held
    /// (no copy), between a ``ExportStep/chunkStarts`` and a ``ExportStep/chunkEnds`` outside it,
    /// so a snapshot of the whole cache holds no lock for longer than one chunk's visits (requests
    /// for that shard's keys wait at most that long). Chunks go by slot, not by use: an entry
    /// added to a slot already passed is not seen, one changed meanwhile is seen as it is when its
    /// chunk is visited. For `medium` ``TokenCacheMedium/disk``, the tokens of kinds that stay in
    /// memory are left where they are, never visited. `goOn` is asked after each chunk: once it
    /// says no, no more is visited and `false` is returned.
    @discardableResult
    func forEachServable(
        now: MonotonicInstant,
        chunkSize: Int,
        medium: TokenCacheMedium,
        goOn: () -> Bool = { true },
        _ visit: (ExportStep) -> Void
    ) -> Bool {
        for shard in shards {
            var start = 0
            while true {
                visit(.chunkStarts)
                let next = shard.state.withLock { shard -> Int? in
                    let end = min(start + chunkSize, shard.table.slotCount)
                    guard start < end else { return nil }
                    let runtime = shard.runtime
                    for slot in start..<end {
                        guard let held = shard.table.entry(inSlot: slot),
                            runtime.keeps(held.key.kind, on: medium),
                            runtime.policy(for: held.key.kind).isServable(remaining: held.value.remaining(at: now))
                        else { continue }
                        _ = shard.withToken(held.value, key: held.key) { view in
                            visit(.token(kind: held.key.kind, id: held.key.tokenKey.id, view: view))
                        }
                    }
                    return end
                }
                visit(.chunkEnds)
                guard goOn() else { return false }
                guard let next else { break }
                start = next
            }
        }
        return true
    }

    /// ``forEachServable(now:chunkSize:medium:_:)``'s tokens copied out a chunk at a time, each
    /// chunk handed to `body` after its lock is let go.
    func forEachServableChunk(
        now: MonotonicInstant,
        chunkSize: Int,
        medium: TokenCacheMedium,
        _ body: ([CachedToken]) -> Void
    ) {
        var tokens: [CachedToken] = []
        forEachServable(now: now, chunkSize: chunkSize, medium: medium) { step in
            switch step {
            case .chunkStarts:
                tokens = []
            case .token(let kind, let id, let view):
                tokens.append(CachedToken(kind: kind, id: id, token: view.served.token, expiresAt: view.expiresAt))
            case .chunkEnds:
                if !tokens.isEmpty { body(tokens) }
            }
        }
    }

    /// Caches `tokens` of configured kinds that can still be served, as if fetched at `now`; an id
    /// the wire refuses (`*`, `.`, `..`, which an earlier version may have cached) is not taken.
    /// Returns how many were taken.
    func take(_ tokens: [CachedToken], now: MonotonicInstant, unixNow: UnixTime) -> Int {
        if let storage {
            // Room for each kind's tokens at once, not one growth after another.
            var kinds: [String: (tokens: Int, idLength: Int, tokenLength: Int)] = [:]
            for cached in tokens {
                let seen = kinds[cached.kind] ?? (0, 0, 0)
                kinds[cached.kind] = (
                    seen.tokens + 1, max(seen.idLength, cached.id.utf8.count),
                    max(seen.tokenLength, cached.token.utf8.count)
                )
            }
            for (kind, batch) in kinds {
                storage.reserve(
                    kind: kind,
                    tokens: batch.tokens,
                    idLength: batch.idLength,
                    tokenLength: batch.tokenLength
                )
            }
        }
        var taken = 0
        for cached in tokens where TokenIdentifier.keyProblem(kind: cached.kind, id: cached.id.utf8) == nil {
            let key = EntryKey(kind: cached.kind, id: cached.id)
            let jitter = random()
            let took = shard(key).state.withLock { shard -> Bool in
                let policy = shard.runtime.policy(for: cached.kind)
                guard shard.runtime.providers[cached.kind] != nil else { return false }
                let remaining = Double(cached.expiresAt) - unixNow.seconds
                guard policy.isServable(remaining: remaining) else { return false }
                var entry = CacheEntry(lastRead: now)
                entry.hold(
                    .owned(cached.token),
                    unixExpiry: UnixTime(seconds: Double(cached.expiresAt)),
                    remaining: remaining,
                    now: now,
                    policy: policy,
                    jitterUnit: jitter
                )
                shard.moveToStorage(&entry, key: key)
                shard.store(key, entry, now: now)
                return true
            }
            if took { taken += 1 }
        }
        return taken
    }
}

/// The store's bound on entries, shared by its shards: a count each shard claims a place in
/// before it adds a key, and gives back when it removes one.
final class EntryBudget: Sendable {
    private let held = Atomic<Int>(0)
    /// The most entries held.
    let maxEntries: Int

    init(maxEntries: Int) { self.maxEntries = maxEntries }

    /// Claims a place for a new entry; `false` (and no place taken) when the bound is reached, so
    /// the caller must evict one to add one.
    func claim() -> Bool {
        let (_, now) = held.wrappingAdd(1, ordering: .relaxed)
        if now <= maxEntries { return true }
        held.wrappingSubtract(1, ordering: .relaxed)
        return false
    }

    /// Takes a place even past the bound.
    func forceClaim() { held.wrappingAdd(1, ordering: .relaxed) }

    /// Gives a place back.
    func release() { held.wrappingSubtract(1, ordering: .relaxed) }
}
