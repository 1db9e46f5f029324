import Logging
import Synchronization
import TokenWire

/// The agent's engine: one cache entry per (kind, id), refresh ahead of expiry, one fetch per key
/// however many ask (singleflight), back-off on provider failures, and a least-recently-used bound.
///
/// A request that the cache can answer is answered synchronously, under one short lock, without
/// waiting on a provider (``lookup(kind:id:minValidity:)``); only misses wait for a fetch.
///
/// Each kind has a generation, raised when a reload changes the kind's provider. A fetch belongs
/// to the generation it started in: what it returns after its kind's generation moved on is never
/// stored, and the requests waiting on it are answered by a fetch on the new provider.
public final class TokenEngine: Sendable {
    /// The answer to a request, or an error reply.
    public typealias Outcome = Result<ServedToken, WireError>

    /// What ``lookup(kind:id:minValidity:)`` found: an answer now, or work to await.
    public enum Lookup: Sendable {
        /// The answer, available at once.
        case ready(Outcome)
        /// The answer after a fetch.
        case pending(@Sendable () async -> Outcome)
    }

    /// One fetch in flight for a key.
    struct Flight: Sendable {
        var task: Task<FetchedToken, any Error>
        /// The kind's generation when the fetch started.
        var generation: Int
    }

    /// What a reload may change: the providers, the policy, and the generation of each kind.
    private struct Runtime {
        var providers: [String: any TokenProvider]
        var policy: RefreshPolicy
        var generations: [String: Int] = [:]
        var nextGeneration = 1
    }

    private struct State {
        var runtime: Runtime
        var table = LRUTable<TokenKey, CacheEntry>()
        var flights: [TokenKey: Flight] = [:]
        var stats = EngineStatistics()
        /// Providers retired by a reload, with the flights they still serve.
        var retiring: [RetiringProvider] = []
    }

    private struct RetiringProvider {
        var provider: any TokenProvider
        var flights: [Task<FetchedToken, any Error>]
    }

    /// Why a request is decided the way it is.
    private enum Decision {
        case serve(ServedToken)
        case fail(WireError)
        case wait(Flight)
    }

    /// The request a waiter makes again when its fetch belonged to an older generation.
    private enum Request {
        case get(requested: Double?)
        case refresh(refused: String?)
    }

    /// A fetch whose kind's provider was replaced while it ran: nothing it returned is stored.
    struct SupersededFetch: Error {}

    /// The provider of each configured kind.
    public var providers: [String: any TokenProvider] { state.withLock { $0.runtime.providers } }
    /// The refresh policy.
    public var policy: RefreshPolicy { state.withLock { $0.runtime.policy } }
    /// The most entries held.
    public let maxEntries: Int
    /// The most requests queued for a fetch place before new misses get `ERR busy`.
    public let maxQueuedFetches: Int
    private let clock: any AgentClock
    private let limiter: AsyncLimiter
    private let random: @Sendable () -> Double
    private let logger: Logger
    private let state: Mutex<State>

    /// Creates an engine.
    /// - Parameters:
    ///   - providers: the provider of each kind; the kinds are exactly these keys.
    ///   - random: numbers in `0..<1` for jitter (injectable for tests).
    public init(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy = RefreshPolicy(),
        maxEntries: Int = 100_000,
        maxConcurrentFetches: Int = 16,
        maxQueuedFetches: Int = 10_000,
        clock: any AgentClock = SystemAgentClock(),
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) },
        logger: Logger = Logger(label: "fleet-tokend.engine")
    ) {
        var runtime = Runtime(providers: providers, policy: policy)
        for kind in providers.keys { runtime.generations[kind] = 0 }
        self.state = Mutex(State(runtime: runtime))
        self.maxEntries = max(1, maxEntries)
        self.maxQueuedFetches = maxQueuedFetches
        self.clock = clock
        self.limiter = AsyncLimiter(limit: max(1, maxConcurrentFetches))
        self.random = random
        self.logger = logger
    }

    /// The configured kinds, sorted.
    public var kinds: [String] { providers.keys.sorted() }

    /// The generation of `kind`'s provider: raised by each reload that changes it.
    public func generation(of kind: String) -> Int? { state.withLock { $0.runtime.generations[kind] } }

    // MARK: Requests

    /// Answers a GET from the cache if it can, or says what to await.
    public func lookup(kind: String, id: String, minValidity: Int?) -> Lookup {
        lookup(TokenKey(kind: kind, id: id), .get(requested: minValidity.map(Double.init)))
    }

    /// GET: a token for `kind`/`id` with at least `minValidity` seconds left (the policy's default
    /// when `nil`).
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
    public func lookupRefresh(kind: String, id: String, refusedToken: String? = nil) -> Lookup {
        lookup(TokenKey(kind: kind, id: id), .refresh(refused: refusedToken))
    }

    /// REFRESH: a freshly fetched token; concurrent refreshes share one fetch.
    public func refresh(kind: String, id: String, refusedToken: String? = nil) async -> Outcome {
        switch lookupRefresh(kind: kind, id: id, refusedToken: refusedToken) {
        case .ready(let outcome): return outcome
        case .pending(let wait): return await wait()
        }
    }

    /// DROP: forgets the cached token. Returns an error when the kind is not configured.
    public func drop(kind: String, id: String) -> WireError? {
        state.withLock { state in
            guard state.runtime.providers[kind] != nil else { return unknownKind(kind, in: state.runtime) }
            _ = state.table.remove(TokenKey(kind: kind, id: id))
            return nil
        }
    }

    /// The current counters.
    public func statistics() -> EngineStatistics {
        let (stats, providers) = state.withLock { state in
            var stats = state.stats
            stats.entries = state.table.count
            stats.inFlight = state.flights.count
            return (stats, Array(state.runtime.providers.values))
        }
        var result = stats
        for skew in providers.compactMap(\.clockSkew) where abs(skew) > abs(result.providerClockSkew ?? 0) {
            result.providerClockSkew = skew
        }
        return result
    }

    private func lookup(_ key: TokenKey, _ request: Request) -> Lookup {
        switch decide(key, request) {
        case .serve(let token): return .ready(.success(token))
        case .fail(let error): return .ready(.failure(error))
        case .wait(let flight):
            return .pending { [self] in await self.outcome(of: flight, for: key, request) }
        }
    }

    // MARK: Background work

    /// One pass of the background refresher: starts refreshes that are due for entries read
    /// within the idle time-out, and drops entries that are idle and no longer servable.
    /// Returns the number of refreshes started.
    @discardableResult
    public func maintain() -> Int {
        let now = clock.monotonicSeconds
        return state.withLock { state in
            let policy = state.runtime.policy
            var due: [TokenKey] = []
            var idle: [TokenKey] = []
            state.table.forEachKey { key, entry in
                let active = policy.isActive(lastRead: entry.lastRead, now: now)
                if !active, !policy.isServable(remaining: entry.remaining(at: now)), now >= entry.retryAfter {
                    idle.append(key)
                } else if active, entry.token != nil, now >= entry.refreshAt, now >= entry.retryAfter,
                    now >= entry.rejectedUntil, state.flights[key] == nil
                {
                    due.append(key)
                }
            }
            for key in idle { state.table.remove(key) }
            var started = 0
            for key in due {
                guard let provider = state.runtime.providers[key.kind] else { continue }
                _ = startFlight(key, provider: provider, in: &state)
                state.stats.backgroundRefreshes += 1
                started += 1
            }
            return started
        }
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
        let retired = state.withLock { state -> [RetiringProvider] in
            let previous = state.runtime
            var runtime = Runtime(providers: providers, policy: policy, nextGeneration: previous.nextGeneration)
            var moved: Set<String> = []
            for kind in Set(providers.keys).union(previous.providers.keys) {
                if changedKinds.contains(kind) || providers[kind] == nil || previous.providers[kind] == nil {
                    moved.insert(kind)
                    if providers[kind] != nil {
                        runtime.generations[kind] = runtime.nextGeneration
                        runtime.nextGeneration += 1
                    }
                } else {
                    runtime.generations[kind] = previous.generations[kind] ?? 0
                }
            }
            state.runtime = runtime
            var gone: [TokenKey] = []
            state.table.forEachKey { key, _ in
                if moved.contains(key.kind) { gone.append(key) }
            }
            for key in gone { state.table.remove(key) }
            var orphaned: [Task<FetchedToken, any Error>] = []
            for (key, flight) in state.flights where moved.contains(key.kind) {
                state.flights[key] = nil
                flight.task.cancel()
                orphaned.append(flight.task)
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
    public var retiringProviders: Int { state.withLock { $0.retiring.count } }

    /// The tokens that can still be served, for handing over to the next process.
    public func exportTokens() -> [CachedToken] {
        let now = clock.monotonicSeconds
        return state.withLock { state in
            let policy = state.runtime.policy
            var tokens: [CachedToken] = []
            state.table.forEachKey { key, entry in
                guard let token = entry.token, policy.isServable(remaining: entry.remaining(at: now)) else { return }
                tokens.append(CachedToken(kind: key.kind, id: key.id, token: token, expiresAt: entry.expiresAtUnix))
            }
            return tokens.reversed()  // least recently used first, so importing keeps the order
        }
    }

    /// Takes over tokens an earlier process held: those of configured kinds that can still be
    /// served are cached as if fetched now. Returns how many were taken.
    @discardableResult
    public func importTokens(_ tokens: [CachedToken]) -> Int {
        let now = clock.monotonicSeconds
        let wall = clock.wallSeconds
        return state.withLock { state in
            let policy = state.runtime.policy
            var taken = 0
            for cached in tokens where state.runtime.providers[cached.kind] != nil {
                let remaining = Double(cached.expiresAt) - wall
                guard policy.isServable(remaining: remaining) else { continue }
                var entry = CacheEntry(lastRead: now)
                entry.token = cached.token
                entry.expiresAtUnix = cached.expiresAt
                entry.expiresAt = now + remaining
                entry.fetchedAt = now
                entry.refreshAt = policy.refreshTime(fetchedAt: now, expiresAt: entry.expiresAt, jitterUnit: random())
                state.table.set(TokenKey(kind: cached.kind, id: cached.id), entry, capacity: maxEntries)
                taken += 1
            }
            return taken
        }
    }

    /// Shuts the providers down (closes HTTP connections), those still retiring after a reload
    /// included.
    public func shutdown() async {
        var seen: Set<ObjectIdentifier> = []
        let all = state.withLock { state in Array(state.runtime.providers.values) + state.retiring.map(\.provider) }
        for provider in all {
            if let id = Self.identity(provider), !seen.insert(id).inserted { continue }
            await provider.shutdown()
        }
    }

    // MARK: Decisions (under the lock)

    private func decide(_ key: TokenKey, _ request: Request) -> Decision {
        let now = clock.monotonicSeconds
        return state.withLock { state in
            guard let provider = state.runtime.providers[key.kind] else {
                return .fail(unknownKind(key.kind, in: state.runtime))
            }
            let policy = state.runtime.policy
            let cached = state.table.update(key) { entry -> Decision? in
                entry.lastRead = now
                switch request {
                case .get(let requested): return decideGet(&entry, requested: requested, policy: policy, now: now)
                case .refresh(let refused): return decideRefresh(&entry, refused: refused, policy: policy, now: now)
                }
            }
            if let cached, let decision = cached {
                if case .serve = decision, case .get = request { state.stats.hits += 1 }
                return decision
            }
            if limiter.waiting >= maxQueuedFetches, state.flights[key] == nil {
                return .fail(WireError(.busy, "too many fetches queued"))
            }
            if case .get = request { state.stats.misses += 1 }
            return .wait(startFlight(key, provider: provider, in: &state))
        }
    }

    /// A GET on an existing entry: serve, fail, or `nil` to fetch.
    private func decideGet(_ entry: inout CacheEntry, requested: Double?, policy: RefreshPolicy, now: Double)
        -> Decision?
    {
        let remaining = entry.remaining(at: now)
        let servable = policy.isServable(remaining: remaining)
        if entry.token != nil {
            let needed = policy.requiredValidity(lifetime: entry.lifetime, requested: requested)
            if remaining >= needed || (servable && now - entry.fetchedAt < policy.refetchGuard) {
                return .serve(served(entry))
            }
        }
        if let failure = holdOff(entry, now: now) {
            return servable ? .serve(served(entry)) : .fail(failure)
        }
        return nil
    }

    /// A REFRESH on an existing entry: serve, fail, or `nil` to fetch.
    private func decideRefresh(_ entry: inout CacheEntry, refused: String?, policy: RefreshPolicy, now: Double)
        -> Decision?
    {
        let servable = entry.token != nil && policy.isServable(remaining: entry.remaining(at: now))
        if let refused {
            if entry.token == refused {
                // Known bad: never served again, by this request or any other.
                entry.token = nil
            } else if servable {
                return .serve(served(entry))
            }
        } else if servable, now - entry.fetchedAt < policy.refetchGuard {
            return .serve(served(entry))
        }
        return holdOff(entry, now: now).map(Decision.fail)
    }

    /// Why no fetch may start for `entry` now: a refusal still remembered, or a back-off.
    private func holdOff(_ entry: CacheEntry, now: Double) -> WireError? {
        if now < entry.rejectedUntil { return WireError(.rejected, entry.rejection) }
        if now < entry.retryAfter {
            let wait = Int((entry.retryAfter - now).rounded(.up))
            return WireError(.unavailable, "provider failing; next try in \(wait) s")
        }
        return nil
    }

    // MARK: Fetching

    private func startFlight(_ key: TokenKey, provider: any TokenProvider, in state: inout State) -> Flight {
        if let flight = state.flights[key] { return flight }
        state.stats.fetches += 1
        let generation = state.runtime.generations[key.kind] ?? 0
        let task = Task { [self] in
            let result: Result<FetchedToken, any Error>
            do {
                result = .success(try await limiter.withPlace { try await provider.fetchToken(for: key) })
            } catch {
                result = .failure(error)
            }
            return try complete(key, generation: generation, with: result)
        }
        let flight = Flight(task: task, generation: generation)
        state.flights[key] = flight
        return flight
    }

    /// Stores a fetch's result, unless its kind moved to a new generation meanwhile; throws when
    /// the token cannot be served.
    private func complete(
        _ key: TokenKey,
        generation: Int,
        with result: Result<FetchedToken, any Error>
    ) throws -> FetchedToken {
        let now = clock.monotonicSeconds
        let wall = clock.wallSeconds
        var metadata: Logger.Metadata = ["token_kind": "\(key.kind)", "token_id": "\(key.id)"]
        let outcome = state.withLock { state -> Result<FetchedToken, any Error> in
            guard state.runtime.generations[key.kind] == generation else {
                return .failure(SupersededFetch())
            }
            if state.flights[key]?.generation == generation { state.flights[key] = nil }
            let policy = state.runtime.policy
            var result = result
            if case .success(let fetched) = result, !policy.isServable(remaining: fetched.expiresAt - wall) {
                result = .failure(ProviderError.failed("token expires in under \(Int(policy.servingFloor)) s"))
            }
            switch result {
            case .success(let fetched):
                let expiresAt = now + (fetched.expiresAt - wall)
                var entry = state.table.peek(key) ?? CacheEntry(lastRead: now)
                entry.token = fetched.token
                entry.expiresAtUnix = Int64(fetched.expiresAt.rounded(.down))
                entry.expiresAt = expiresAt
                entry.fetchedAt = now
                entry.refreshAt = policy.refreshTime(fetchedAt: now, expiresAt: expiresAt, jitterUnit: random())
                entry.failures = 0
                entry.retryAfter = 0
                entry.rejectedUntil = 0
                state.table.set(key, entry, capacity: maxEntries)
                return .success(fetched)
            case .failure(let error):
                let providerError = error as? ProviderError ?? .failed("\(type(of: error))")
                var entry = state.table.peek(key) ?? CacheEntry(lastRead: now)
                entry.failures += 1
                var backoff = policy.backoff(failures: entry.failures, jitterUnit: random())
                switch providerError {
                case .rejected(let text):
                    entry.rejectedUntil = now + policy.rejectionMemory
                    entry.rejection = text
                case .throttled(_, let retryAfter):
                    backoff = max(backoff, min(retryAfter, policy.retryAfterCap))
                case .failed:
                    break
                }
                entry.retryAfter = now + backoff
                state.table.set(key, entry, capacity: maxEntries)
                state.stats.fetchErrors += 1
                state.stats.lastFailureAt = now
                state.stats.lastFailure = "\(key.kind): \(providerError)"
                metadata["failures"] = "\(entry.failures)"
                return .failure(providerError)
            }
        }
        switch outcome {
        case .success(let fetched):
            metadata["token_fingerprint"] = "\(TokenFingerprint.of(fetched.token))"
            metadata["expires_in_s"] = "\(Int(fetched.expiresAt - wall))"
            logger.debug("fetched token", metadata: metadata)
            return fetched
        case .failure(let error as SupersededFetch):
            logger.debug("fetch superseded by a reload; its result is not stored", metadata: metadata)
            throw error
        case .failure(let error):
            metadata["provider_status"] = "\(error)"
            logger.warning("token fetch failed", metadata: metadata)
            throw error
        }
    }

    /// Awaits `flight` for a request; a fetch superseded by a reload is replaced by the request
    /// made again against the new provider.
    private func outcome(of flight: Flight, for key: TokenKey, _ request: Request) async -> Outcome {
        var flight = flight
        for _ in 0..<4 {
            let result = await flight.task.result
            if case .failure(let error) = result, error is SupersededFetch || error is CancellationError {
                if state.withLock({ $0.runtime.generations[key.kind] }) != flight.generation {
                    switch decide(key, request) {
                    case .serve(let token): return .success(token)
                    case .fail(let error): return .failure(error)
                    case .wait(let next):
                        flight = next
                        continue
                    }
                }
            }
            return answer(result, for: key, request)
        }
        return .failure(WireError(.unavailable, "the provider changed while fetching; try again"))
    }

    private func answer(_ result: Result<FetchedToken, any Error>, for key: TokenKey, _ request: Request) -> Outcome {
        switch result {
        case .success(let fetched):
            if case .refresh(let refused?) = request, fetched.token == refused {
                return .failure(WireError(.unavailable, "the provider handed out the refused token again"))
            }
            return .success(ServedToken(token: fetched.token, expiresAt: Int64(fetched.expiresAt.rounded(.down))))
        case .failure(let error):
            if case .get = request {
                let now = clock.monotonicSeconds
                let cached = state.withLock { state -> ServedToken? in
                    guard let entry = state.table.peek(key),
                        state.runtime.policy.isServable(remaining: entry.remaining(at: now))
                    else { return nil }
                    state.stats.servedAfterFailure += 1
                    return served(entry)
                }
                if let cached { return .success(cached) }
            }
            switch error as? ProviderError {
            case .rejected(let text): return .failure(WireError(.rejected, text))
            case .failed(let text): return .failure(WireError(.unavailable, text))
            case .throttled(let text, let retryAfter):
                return .failure(WireError(.unavailable, "\(text); retry after \(Int(retryAfter)) s"))
            case nil: return .failure(WireError(.unavailable, "fetch failed"))
            }
        }
    }

    private func served(_ entry: CacheEntry) -> ServedToken {
        ServedToken(token: entry.token ?? "", expiresAt: entry.expiresAtUnix)
    }

    private func unknownKind(_ kind: String, in runtime: Runtime) -> WireError {
        let kinds = runtime.providers.keys.sorted().joined(separator: ",")
        return WireError(.badKind, "kind \(kind) is not configured; configured: \(kinds)")
    }

    /// The identity of a provider that is an object (HTTP providers); `nil` for value types.
    private static func identity(_ provider: any TokenProvider) -> ObjectIdentifier? {
        guard type(of: provider) is AnyClass else { return nil }
        return ObjectIdentifier(provider as AnyObject)
    }
}
