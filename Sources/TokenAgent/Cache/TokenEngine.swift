import Logging
import Synchronization
import TokenWire

/// The agent's engine: one cache entry per (kind, id), refresh ahead of expiry, one fetch per key
/// however many ask (singleflight), back-off on provider failures, and a least-recently-used bound.
///
/// It composes three parts, each with one job: the ``TokenStore`` (entries and every decision
/// about them, sharded, no waiting), the ``FetchCoordinator`` (fetches in flight, the concurrency
/// limit, storing results, reloads) and the scheduler's queue inside each store shard (what falls
/// due when). A request the cache can answer is answered synchronously under one shard's lock
/// (``lookup(kind:id:minValidity:requester:)``); only misses wait for a fetch.
///
/// Each kind has a generation, raised when a reload changes the kind's provider. A fetch belongs
/// to the generation it started in: what it returns after its kind's generation moved on is never
/// stored, and the requests waiting on it are answered by a fetch on the new provider.
public final class TokenEngine: Sendable {
    /// The answer to a request, or why there is none.
    public typealias Outcome = Result<ServedToken, EngineFailure>

    /// What a lookup found: an answer now, or work to await.
    public enum Lookup: Sendable {
        /// The answer, available at once.
        case ready(Outcome)
        /// The answer after a fetch.
        case pending(@Sendable () async -> Outcome)
    }

    /// What a GET answered in place came to (``lookup(kind:idBytes:minValidity:requester:serve:)``).
    public enum InPlaceLookup: Sendable {
        /// The cached token was handed to `serve`.
        case served
        /// No cached token was served: what to answer, or to await.
        case answer(Lookup)
    }

    /// The most entries held.
    public let maxEntries: Int
    /// The bounds on fetches, per kind and per uid.
    public let fetchLimits: FetchLimits
    // What the engine works with: its clock, its store and its fetches.
    let clock: any AgentClock
    /// Whether `clock` is the machine's own (``now``, ``unixNow``).
    private let clockIsSystem: Bool
    let store: TokenStore
    let fetches: FetchCoordinator
    /// Raised by every reload: lets callers that keep the kind names notice a change cheaply.
    private let runtimeVersion = Atomic<Int>(0)
    /// Watches for steps of the wall clock, once a pass of the scheduler.
    private let wallClock = Mutex(WallClockWatch())
    private let logger: Logger
    /// Runs where a request the store decided to fetch for (a GET that missed, a REFRESH) goes to
    /// join or start a fetch, after the store's decision and before the coordinator's lock: the
    /// window in which a fetch in flight may end. Tests make that race happen here; the agent
    /// passes none.
    private let beforeJoiningAFlight: (@Sendable (TokenKey) -> Void)?

    /// Creates an engine.
    /// - Parameters:
    ///   - providers: the provider of each kind; the kinds are exactly these keys.
    ///   - random: numbers in `0..<1` for jitter (injectable for tests).
    public convenience init(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy = RefreshPolicy(),
        maxEntries: Int = 100_000,
        fetchLimits: FetchLimits = FetchLimits(),
        clock: any AgentClock = SystemAgentClock(),
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        storage: (any TokenStorage)? = nil,
        logger: Logger = Logger(label: "fleet-tokend.engine"),
        metrics: EngineMetrics = EngineMetrics()
    ) {
        self.init(
            providers: providers,
            policy: policy,
            maxEntries: maxEntries,
            fetchLimits: fetchLimits,
            clock: clock,
            random: random,
            storage: storage,
            logger: logger,
            metrics: metrics,
            beforeJoiningAFlight: nil
        )
    }

    /// Creates an engine that calls `beforeJoiningAFlight` whenever a request the store decided to
    /// fetch for is about to join or start one; for tests.
    init(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy,
        maxEntries: Int,
        fetchLimits: FetchLimits,
        clock: any AgentClock,
        random: @escaping @Sendable () -> Double,
        storage: (any TokenStorage)?,
        logger: Logger,
        metrics: EngineMetrics,
        beforeJoiningAFlight: (@Sendable (TokenKey) -> Void)?
    ) {
        self.beforeJoiningAFlight = beforeJoiningAFlight
        let generations = Dictionary(uniqueKeysWithValues: providers.keys.map { ($0, 0) })
        let runtime = EngineRuntime(providers: providers, policy: policy, generations: generations)
        self.maxEntries = max(1, maxEntries)
        self.fetchLimits = fetchLimits
        self.clock = clock
        self.clockIsSystem = clock is SystemAgentClock
        self.logger = logger
        self.store = TokenStore(runtime: runtime, maxEntries: self.maxEntries, storage: storage, random: random)
        self.fetches = FetchCoordinator(
            runtime: runtime,
            store: store,
            limits: fetchLimits,
            clock: clock,
            logger: logger,
            metrics: metrics
        )
    }

    /// The provider of each configured kind.
    public var providers: [String: any TokenProvider] { fetches.runtime.providers }
    /// The refresh policy.
    public var policy: RefreshPolicy { fetches.runtime.policy }
    /// The refresh policy of `kind`: ``policy``, with a higher serving floor when its provider
    /// asks one (``TokenProvider/servingFloor``).
    public func policy(for kind: String) -> RefreshPolicy { fetches.runtime.policy(for: kind) }
    /// The configured kinds, sorted.
    public var kinds: [String] { fetches.runtime.kinds }
    /// A number raised by every reload, read without a lock: when it has not moved, ``kinds`` has not.
    public var kindsVersion: Int { runtimeVersion.load(ordering: .acquiring) }

    /// The generation of `kind`'s provider: raised by each reload that changes it.
    public func generation(of kind: String) -> Int? { fetches.generation(of: kind) }

    // MARK: Requests

    /// Answers a GET from the cache if it can, or says what to await. `requester` is the asking
    /// peer's uid, if known: it bounds the first fetches one uid may have waiting.
    public func lookup(kind: String, id: String, minValidity: Int?, requester: UInt32? = nil) -> Lookup {
        lookup(EntryKey(kind: kind, id: id), .get(requested: minValidity.map(Double.init)), requester: requester)
    }

    /// Answers a GET whose id is given as its UTF-8 bytes (straight from a request buffer, valid
    /// for the call only). A cached token is handed to `serve` (under the store's lock, so it is
    /// the token decided on, wherever it is kept) and the lookup is `.served`; otherwise it is the
    /// answer, or what to await. A cache hit makes no copy of the id or the token and allocates
    /// nothing.
    public func lookup(
        kind: String,
        idBytes: UnsafeRawBufferPointer,
        minValidity: Int?,
        requester: UInt32? = nil,
        serve: (TokenView) -> Void
    ) -> InPlaceLookup {
        let key = EntryKey(kind: kind, borrowing: idBytes)
        let request = EngineRequest.get(requested: minValidity.map(Double.init))
        switch decide(key, request, requester: requester, serve: serve) {
        case .served: return .served
        case .ready(let outcome): return .answer(.ready(outcome))
        case .wait(let flight, let tokenKey):
            return .answer(
                .pending { [self] in await self.outcome(of: flight, for: tokenKey, request, requester: requester) }
            )
        }
    }

    /// GET, awaited: a token for `kind`/`id` with at least `minValidity` seconds left (the
    /// policy's default when `nil`), from the cache or the fetch it joins. The metadata
    /// endpoint's way in (`EngineMetadataTokens`); the socket's connections use
    /// ``lookup(kind:idBytes:minValidity:requester:serve:)``, which answers a hit in place and
    /// hands a miss's wait to the connection.
    public func get(kind: String, id: String, minValidity: Int? = nil) async -> Outcome {
        switch lookup(kind: kind, id: id, minValidity: minValidity) {
        case .ready(let outcome): return outcome
        case .pending(let wait): return await wait()
        }
    }

    /// Says what a REFRESH needs. Without `refusedToken`: a fetch, unless the key was fetched in
    /// the last few seconds (the policy's re-fetch guard). With the token the caller was refused:
    /// a fetch only while that token is still the cached one (which stops being served at once);
    /// otherwise the newer cached token, at once.
    public func lookupRefresh(
        kind: String,
        id: String,
        refusedToken: String? = nil,
        requester: UInt32? = nil
    ) -> Lookup {
        lookup(EntryKey(kind: kind, id: id), .refresh(refused: refusedToken), requester: requester)
    }

    /// DROP: forgets the cached token. Returns a failure when the kind is not configured.
    public func drop(kind: String, id: String) -> EngineFailure? {
        store.drop(EntryKey(kind: kind, id: id))
    }

    /// What `INFO` tells about `kind`/`id`: never the token. `nil` when nothing is cached for it;
    /// a failure when the kind is not configured. The entry is not touched (not counted as read).
    public func info(kind: String, id: String) -> Result<KeyInfo?, EngineFailure> {
        store.info(EntryKey(kind: kind, id: id), now: now, unixNow: unixNow)
    }

    /// The provider health of every configured kind, sorted by kind.
    public func providerHealth() -> [ProviderHealth] { fetches.providerHealth() }

    /// The entries of every configured kind, surveyed now: one walk of the whole cache, for
    /// metrics and health (every few seconds), never for a request.
    public func survey() -> [KindSurvey] {
        let surveys = store.survey(now: now)
        return kinds.map { surveys[$0] ?? KindSurvey(kind: $0) }
    }

    // Every reading of the engine's clocks goes through these two. The machine's own clocks (the
    // agent's, always outside tests) are read directly: through `any AgentClock` each reading was
    // an existential call, about a fiftieth of a cached GET's instructions.

    /// The monotonic clock reading the engine uses.
    public var now: MonotonicInstant { clockIsSystem ? SystemAgentClock().now : clock.now }

    /// The engine's wall clock now (what a token's `exp` is judged by). The machine's is read at
    /// the kernel's last tick (``SystemAgentClock/coarseWallSeconds``), at most 10 ms behind: a
    /// token is served only with its monotonic deadline and the serving floor (10 s or more)
    /// left, so the lag can only matter after a wall-clock step, and then by those milliseconds.
    public var unixNow: UnixTime {
        clockIsSystem ? UnixTime(seconds: SystemAgentClock().coarseWallSeconds) : clock.unixNow
    }

    /// The current counters.
    public func statistics() -> EngineStatistics {
        var stats = EngineStatistics()
        store.addCounts(to: &stats)
        fetches.addCounts(to: &stats)
        for skew in providers.values.compactMap(\.clockSkew) where abs(skew) > abs(stats.providerClockSkew ?? 0) {
            stats.providerClockSkew = skew
        }
        return stats
    }

    private func lookup(_ key: EntryKey, _ request: EngineRequest, requester: UInt32?) -> Lookup {
        switch decide(key, request, requester: requester) {
        case .served: preconditionFailure("decide(_:_:) returns a served token as ready")
        case .ready(let outcome): return .ready(outcome)
        case .wait(let flight, let tokenKey):
            return .pending { [self] in await self.outcome(of: flight, for: tokenKey, request, requester: requester) }
        }
    }

    private enum Decision {
        /// The cached token was handed to the caller's `serve`.
        case served
        case ready(Outcome)
        case wait(FetchCoordinator.Flight, TokenKey)
    }

    /// Decides `request`, a cached token as a ``ServedToken`` of its own.
    private func decide(_ key: EntryKey, _ request: EngineRequest, requester: UInt32?) -> Decision {
        var served: ServedToken?
        let decision = decide(key, request, requester: requester) { served = $0.served }
        if case .served = decision, let served { return .ready(.success(served)) }
        return decision
    }

    /// Decides `request`; a cached token is handed to `serve` under the store's lock. The store's
    /// first decision is all a cache hit takes; anything else is settled out of line, so a hit
    /// pays for none of it.
    private func decide(
        _ key: EntryKey,
        _ request: EngineRequest,
        requester: UInt32?,
        serve: (TokenView) -> Void
    ) -> Decision {
        var fetched = MonotonicInstant.origin
        let decision = store.decide(key, request, now: now, wall: unixNow, fetched: &fetched, serve: serve)
        if case .served = decision { return .served }
        return settle(decision, fetched: fetched, key, request, requester: requester, serve: serve)
    }

    /// Settles the store's `decision` on `request` when it did not serve: a failure, or a fetch to
    /// start or join. `fetched` is when the entry's token was fetched, as the store saw it.
    @inline(never)
    private func settle(
        _ decision: StoreDecision,
        fetched: MonotonicInstant,
        _ key: EntryKey,
        _ request: EngineRequest,
        requester: UInt32?,
        serve: (TokenView) -> Void
    ) -> Decision {
        // A fetch of this key may end between the store's decision and the coordinator's lock:
        // then no flight is left to join, and its token, recorded before its flight ended, may
        // answer the request. It is decided again (twice at most; then it fetches as decided).
        var decision = decision
        var fetched = fetched
        var attempt = 1
        while true {
            switch decision {
            case .served: return .served
            case .fail(let failure): return .ready(.failure(failure))
            case .fetch:
                let tokenKey = key.tokenKey
                let seen = fetched
                let recheck = attempt < 3
                beforeJoiningAFlight?(tokenKey)
                switch fetches.flight(
                    for: tokenKey,
                    owner: requester,
                    unless: { recheck && store.fetchedAt(key) != seen }
                ) {
                case .waiting(let flight): return .wait(flight, tokenKey)
                case .recordedSince:
                    attempt += 1
                    fetched = .origin
                    decision = store.decide(key, request, now: now, wall: unixNow, fetched: &fetched, serve: serve)
                case .refused(let failure):
                    // A report whose replacement could not start has not used up its window.
                    if case .refresh(let refused?) = request { store.withdrawReport(key, refused: refused) }
                    return .ready(.failure(failure))
                }
            case .joinOrFail(let failure):
                let tokenKey = key.tokenKey
                guard let flight = fetches.flightInProgress(for: tokenKey) else { return .ready(.failure(failure)) }
                return .wait(flight, tokenKey)
            }
        }
    }

    /// Awaits `flight` for a request; a fetch superseded by a reload is replaced by the request
    /// made again against the new provider. A request whose task is cancelled (its connection
    /// closed) leaves the flight, which is cancelled when no request waits for it any more and it
    /// still waits for a place at the provider.
    private func outcome(
        of flight: FetchCoordinator.Flight,
        for key: TokenKey,
        _ request: EngineRequest,
        requester: UInt32?
    ) async -> Outcome {
        var flight = flight
        for round in 0..<4 {
            let waited = flight
            let result = await withTaskCancellationHandler {
                await waited.task.result
            } onCancel: {
                fetches.left(key, flight: waited)
            }
            if case .failure(let error) = result,
                error is FetchCoordinator.SupersededFetch || error is CancellationError,
                fetches.generation(of: key.kind) != flight.generation
            {
                // A request that has gone does not start the fetch again; nor does the last round.
                guard !Task.isCancelled, round < 3 else { return .failure(.providerChanged) }
                switch decide(EntryKey(kind: key.kind, id: key.id), request, requester: requester) {
                case .served: preconditionFailure("decide(_:_:) returns a served token as ready")
                case .ready(let outcome): return outcome
                case .wait(let next, _):
                    flight = next
                    continue
                }
            }
            return answer(result, for: key, request)
        }
        return .failure(.providerChanged)
    }

    private func answer(_ result: Result<FetchedToken, any Error>, for key: TokenKey, _ request: EngineRequest)
        -> Outcome
    {
        switch result {
        case .success(let fetched):
            if case .refresh(let refused?) = request, fetched.token == refused {
                return .failure(.refusedTokenReissued)
            }
            return .success(ServedToken(token: fetched.token, expiresAt: fetched.expiresAt.wholeSeconds))
        case .failure(let error):
            if request.isGet,
                let cached = store.servableAfterFailure(
                    EntryKey(kind: key.kind, id: key.id),
                    now: now,
                    wall: unixNow
                )
            {
                return .success(cached)
            }
            if let error = error as? ProviderError { return .failure(EngineFailure(error)) }
            if let failure = error as? EngineFailure { return .failure(failure) }
            return .failure(.fetchFailed("fetch failed"))
        }
    }

    // MARK: Background work

    /// One pass of the background refresher: looks only at the entries whose time has come in the
    /// scheduler's queues, starts the refreshes that are due for entries read within the idle
    /// time-out, and forgets entries that are idle and no longer servable. Returns the number of
    /// refreshes started.
    @discardableResult
    public func maintain() -> Int {
        let now = self.now
        let wall = self.unixNow
        if let step = wallClock.withLock({ $0.step(now: now, wall: wall) }) {
            // Every deadline is monotonic, fixed at fetch time: a token's `exp` by the stepped
            // wall clock may now come sooner. Those deadlines move to it (shared memory too), so
            // nothing, here or in a reader, serves a token past its `exp`, and their refreshes
            // fall due as much sooner.
            let moved = store.wallClockStepped(now: now, wall: wall)
            logger.warning(
                "wall clock stepped",
                metadata: ["step_s": "\(Int(saturating: step.rounded()))", "tokens_expiring_sooner": "\(moved)"]
            )
        }
        return fetches.refresh(store.takeDue(now: now))
    }

    /// Swaps in new providers and policy (a reload). Entries of kinds in `changedKinds`, or whose
    /// kind is no longer configured, are dropped, and those kinds move to a new generation: their
    /// fetches in flight are cancelled and whatever they return is not stored. Every other cached
    /// token is kept. A provider no longer used is shut down once its last fetch ends.
    public func reconfigure(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy,
        changedKinds: Set<String>
    ) {
        fetches.reconfigure(providers: providers, policy: policy, changedKinds: changedKinds, now: now)
        runtimeVersion.add(1, ordering: .releasing)
    }

    /// Marks the cached keys among `ids` of `kind` as read now (TOUCH: keys read through shared
    /// memory keep earning background refreshes). Never fetches. Returns how many were cached;
    /// `nil` when the kind is not configured.
    @discardableResult
    public func touch(kind: String, ids: [String]) -> Int? {
        guard fetches.runtime.providers[kind] != nil else { return nil }
        return store.touch(kind: kind, ids: ids, now: now)
    }

    /// WARM: asks for the tokens of `ids` of `kind` ahead of need, without waiting for any fetch.
    /// Each id cached and servable (as a default GET would be served) is counted `cached` and
    /// marked read; each id with a fetch in flight is counted `queued`; any other, unless held off
    /// (a back-off, a remembered refusal), gets a fetch at ``FetchPriority/warm`` owned by
    /// `requester` (in its first-fetch bound) and taking a place in `allowance`, while the kind's
    /// queue (at most half of it for `WARM` fetches) and those bounds have room, and is counted
    /// `queued`. A `WARM` fetch that fails is recorded like any other (back-off), but nobody waits
    /// for it; a request that needs the key joins it and raises it to GET priority. Repeated ids
    /// count once. A failure when the kind is not configured.
    public func warm(
        kind: String,
        ids: [String],
        requester: UInt32? = nil,
        allowance: WarmAllowance = WarmAllowance()
    ) -> Result<WarmOutcome, EngineFailure> {
        let runtime = fetches.runtime
        guard runtime.providers[kind] != nil else { return .failure(runtime.unknownKind(kind)) }
        var outcome = WarmOutcome()
        var seen: Set<[UInt8]> = []
        var toFetch: [TokenKey] = []
        let now = self.now
        let wall = self.unixNow
        for id in ids where seen.insert(Array(id.utf8)).inserted && !TokenIdentifier.isReserved(id.utf8) {
            let key = EntryKey(kind: kind, id: id)
            var fetched = MonotonicInstant.origin
            switch store.decide(key, .warm, now: now, wall: wall, fetched: &fetched, serve: { _ in }) {
            case .served: outcome.cached += 1
            case .fetch: toFetch.append(key.tokenKey)
            case .fail, .joinOrFail: continue
            }
        }
        (outcome.queued, outcome.started) = fetches.warm(toFetch, owner: requester, allowance: allowance)
        return .success(outcome)
    }

    /// The counters of each configured kind's signature budget, for the kinds whose provider has
    /// one, sorted by kind (kinds sharing a budget each show its counters).
    public func signatureBudgets() -> [(kind: String, counters: SignatureBudget.Counters)] {
        fetches.signatureBudgets()
    }

    /// Providers replaced by a reload whose last fetches have not ended yet.
    public var retiringProviders: Int { fetches.retiringProviders }

    /// Shuts the providers down (closes HTTP connections), those still retiring after a reload
    /// included.
    public func shutdown() async {
        var seen: Set<ObjectIdentifier> = []
        for provider in fetches.allProviders {
            if let id = FetchCoordinator.identity(provider), !seen.insert(id).inserted { continue }
            await provider.shutdown()
        }
    }
}

/// The hand-over of the engine's tokens to the next process, and their take-over by it: through
/// systemd's file-descriptor store (``TokenCacheMedium/memory``) or the cache file
/// (``TokenCacheMedium/disk``), which never holds the tokens of a kind that keeps them in memory.
extension TokenEngine {
    /// The tokens that can still be served, for handing over to the next process through
    /// `medium`: to ``TokenCacheMedium/disk``, never those of a kind whose tokens stay in memory
    /// (``TokenProvider/tokensStayInMemory``: access tokens).
    public func exportTokens(to medium: TokenCacheMedium) -> [CachedToken] {
        var tokens: [CachedToken] = []
        exportTokens(to: medium) { tokens += $0 }
        return tokens
    }

    /// The slots one chunk of ``exportTokens(to:chunkSize:_:)`` copies under a shard's lock.
    public static let exportChunk = 32

    /// Calls `body` with the tokens that can still be served, for `medium` as
    /// ``exportTokens(to:)`` chooses them, in chunks of at most `chunkSize` of a shard's slots,
    /// each copied out under that shard's lock and handed over after the lock is let go: a
    /// snapshot of the whole cache delays a request by one chunk's copy at most.
    public func exportTokens(
        to medium: TokenCacheMedium,
        chunkSize: Int = TokenEngine.exportChunk,
        _ body: ([CachedToken]) -> Void
    ) {
        store.forEachServableChunk(now: now, chunkSize: max(1, chunkSize), medium: medium, body)
    }

    /// Appends the tokens that can still be served, for `medium` as ``exportTokens(to:)`` chooses
    /// them, to `builder`, each encoded straight from where the store holds it (no `String` per
    /// token), under its shard's lock a chunk of at most `chunkSize` slots at a time, and each
    /// chunk checksummed once the lock is let go (``CacheSnapshot/Builder/checksumAppended()``).
    /// Room for a chunk is made before the lock is taken, so the body never grows under it.
    /// `afterChunk` runs after each chunk, outside the lock, with the builder (where a writer
    /// drains it and a periodic pass rests); once it returns `false`, the export stops there and
    /// returns `false`.
    @discardableResult
    public func exportTokens(
        to medium: TokenCacheMedium,
        into builder: inout CacheSnapshot.Builder,
        chunkSize: Int = TokenEngine.exportChunk,
        afterChunk: (inout CacheSnapshot.Builder) -> Bool = { _ in true }
    ) -> Bool {
        let chunkSize = max(1, chunkSize)
        var goOn = true
        return store.forEachServable(now: now, chunkSize: chunkSize, medium: medium, goOn: { goOn }) { step in
            switch step {
            case .chunkStarts:
                builder.makeRoom(forTokens: chunkSize)
            case .token(let kind, let id, let view):
                builder.append(kind: kind, id: id, expiresAt: view.expiresAt, token: view.bytes)
            case .chunkEnds:
                builder.checksumAppended()
                goOn = afterChunk(&builder)
            }
        }
    }

    /// Takes over tokens an earlier process held, read from `medium`: those of configured kinds
    /// that can still be served are cached as if fetched now; from ``TokenCacheMedium/disk``,
    /// never those of a kind whose tokens stay in memory. Returns how many were taken.
    @discardableResult
    public func importTokens(_ tokens: [CachedToken], from medium: TokenCacheMedium) -> Int {
        var tokens = tokens
        if medium == .disk {
            let runtime = fetches.runtime
            tokens.removeAll { !runtime.keeps($0.kind, on: .disk) }
        }
        return store.take(tokens, now: now, unixNow: unixNow)
    }

    /// Whether `kind`'s tokens stay in memory, never written to disk
    /// (``TokenProvider/tokensStayInMemory``); `false` for a kind not configured.
    public func tokensStayInMemory(kind: String) -> Bool {
        !fetches.runtime.keeps(kind, on: .disk)
    }
}
