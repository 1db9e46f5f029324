import Logging
import Synchronization
import TokenWire

/// The agent's engine: one cache entry per (kind, id), refresh ahead of expiry, one fetch per key
/// however many ask (singleflight), back-off on provider failures, and a least-recently-used bound.
///
/// A request that the cache can answer is answered synchronously, under one short lock, without
/// waiting on a provider (``lookup(_:)``); only misses wait for a fetch.
public final class TokenEngine: Sendable {
    /// The answer to a request, or an error reply.
    public typealias Outcome = Result<ServedToken, WireError>

    /// What ``lookup(_:)`` found: an answer now, or work to await.
    public enum Lookup: Sendable {
        /// The answer, available at once.
        case ready(Outcome)
        /// The answer after a fetch.
        case pending(@Sendable () async -> Outcome)
    }

    private struct State {
        var table = LRUTable<TokenKey, CacheEntry>()
        var flights: [TokenKey: Task<FetchedToken, any Error>] = [:]
        var stats = EngineStatistics()
    }

    private enum Decision {
        case serve(ServedToken)
        case fail(WireError)
        case wait(Task<FetchedToken, any Error>)
    }

    /// What a reload may change: the providers and the policy.
    private struct Runtime {
        var providers: [String: any TokenProvider]
        var policy: RefreshPolicy
    }

    private let runtime: Mutex<Runtime>

    /// The provider of each configured kind.
    public var providers: [String: any TokenProvider] { runtime.withLock { $0.providers } }
    /// The refresh policy.
    public var policy: RefreshPolicy { runtime.withLock { $0.policy } }
    /// The most entries held.
    public let maxEntries: Int
    /// The most requests queued for a fetch place before new misses get `ERR busy`.
    public let maxQueuedFetches: Int
    private let clock: any AgentClock
    private let limiter: AsyncLimiter
    private let random: @Sendable () -> Double
    private let logger: Logger
    private let state = Mutex(State())

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
        self.runtime = Mutex(Runtime(providers: providers, policy: policy))
        self.maxEntries = max(1, maxEntries)
        self.maxQueuedFetches = maxQueuedFetches
        self.clock = clock
        self.limiter = AsyncLimiter(limit: max(1, maxConcurrentFetches))
        self.random = random
        self.logger = logger
    }

    /// The configured kinds, sorted.
    public var kinds: [String] { providers.keys.sorted() }

    // MARK: Requests

    /// Answers a GET from the cache if it can, or says what to await.
    public func lookup(kind: String, id: String, minValidity: Int?) -> Lookup {
        let key = TokenKey(kind: kind, id: id)
        switch decideGet(key, requested: minValidity.map(Double.init)) {
        case .serve(let token): return .ready(.success(token))
        case .fail(let error): return .ready(.failure(error))
        case .wait(let flight):
            return .pending { [self] in await self.outcome(of: flight, for: key, fallBackToCached: true) }
        }
    }

    /// GET: a token for `kind`/`id` with at least `minValidity` seconds left (the policy's default
    /// when `nil`).
    public func get(kind: String, id: String, minValidity: Int? = nil) async -> Outcome {
        switch lookup(kind: kind, id: id, minValidity: minValidity) {
        case .ready(let outcome): return outcome
        case .pending(let wait): return await wait()
        }
    }

    /// Says what a REFRESH needs: a fetch, unless the key was fetched in the last few seconds.
    public func lookupRefresh(kind: String, id: String) -> Lookup {
        let key = TokenKey(kind: kind, id: id)
        switch decideRefresh(key) {
        case .serve(let token): return .ready(.success(token))
        case .fail(let error): return .ready(.failure(error))
        case .wait(let flight):
            return .pending { [self] in await self.outcome(of: flight, for: key, fallBackToCached: false) }
        }
    }

    /// REFRESH: a freshly fetched token; concurrent refreshes share one fetch.
    public func refresh(kind: String, id: String) async -> Outcome {
        switch lookupRefresh(kind: kind, id: id) {
        case .ready(let outcome): return outcome
        case .pending(let wait): return await wait()
        }
    }

    /// DROP: forgets the cached token. Returns an error when the kind is not configured.
    public func drop(kind: String, id: String) -> WireError? {
        guard providers[kind] != nil else { return unknownKind(kind) }
        _ = state.withLock { $0.table.remove(TokenKey(kind: kind, id: id)) }
        return nil
    }

    /// The current counters.
    public func statistics() -> EngineStatistics {
        state.withLock { state in
            var stats = state.stats
            stats.entries = state.table.count
            stats.inFlight = state.flights.count
            return stats
        }
    }

    // MARK: Background work

    /// One pass of the background refresher: starts refreshes that are due for entries read
    /// within the idle time-out, and drops entries that are idle and no longer servable.
    /// Returns the number of refreshes started.
    @discardableResult
    public func maintain() -> Int {
        let now = clock.monotonicSeconds
        let (providers, policy) = runtime.withLock { ($0.providers, $0.policy) }
        return state.withLock { state in
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
                guard let provider = providers[key.kind] else { continue }
                _ = startFlight(key, provider: provider, in: &state)
                state.stats.backgroundRefreshes += 1
                started += 1
            }
            return started
        }
    }

    /// Swaps in new providers and policy (a reload). Entries of kinds in `changedKinds`, or whose
    /// kind is no longer configured, are dropped; every other cached token is kept.
    public func reconfigure(
        providers: [String: any TokenProvider],
        policy: RefreshPolicy,
        changedKinds: Set<String>
    ) {
        runtime.withLock { $0 = Runtime(providers: providers, policy: policy) }
        state.withLock { state in
            var gone: [TokenKey] = []
            state.table.forEachKey { key, _ in
                if changedKinds.contains(key.kind) || providers[key.kind] == nil { gone.append(key) }
            }
            for key in gone { state.table.remove(key) }
        }
    }

    /// The tokens that can still be served, for handing over to the next process.
    public func exportTokens() -> [CachedToken] {
        let now = clock.monotonicSeconds
        let policy = self.policy
        return state.withLock { state in
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
        let (providers, policy) = runtime.withLock { ($0.providers, $0.policy) }
        return state.withLock { state in
            var taken = 0
            for cached in tokens where providers[cached.kind] != nil {
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

    /// Shuts the providers down (closes HTTP connections).
    public func shutdown() async {
        for provider in providers.values { await provider.shutdown() }
    }

    // MARK: Decisions (under the lock)

    private func decideGet(_ key: TokenKey, requested: Double?) -> Decision {
        let (provider, policy) = runtime.withLock { ($0.providers[key.kind], $0.policy) }
        guard let provider else { return .fail(unknownKind(key.kind)) }
        let now = clock.monotonicSeconds
        return state.withLock { state in
            if let decision = state.table.update(
                key,
                { entry -> Decision? in
                    entry.lastRead = now
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
            ), let decision {
                if case .serve = decision { state.stats.hits += 1 }
                return decision
            }
            if limiter.waiting >= maxQueuedFetches, state.flights[key] == nil {
                return .fail(WireError(.busy, "too many fetches queued"))
            }
            state.stats.misses += 1
            return .wait(startFlight(key, provider: provider, in: &state))
        }
    }

    private func decideRefresh(_ key: TokenKey) -> Decision {
        let (provider, policy) = runtime.withLock { ($0.providers[key.kind], $0.policy) }
        guard let provider else { return .fail(unknownKind(key.kind)) }
        let now = clock.monotonicSeconds
        return state.withLock { state in
            if let decision = state.table.update(
                key,
                { entry -> Decision? in
                    entry.lastRead = now
                    if entry.token != nil, policy.isServable(remaining: entry.remaining(at: now)),
                        now - entry.fetchedAt < policy.refetchGuard
                    {
                        return .serve(served(entry))
                    }
                    return holdOff(entry, now: now).map(Decision.fail)
                }
            ), let decision {
                return decision
            }
            if limiter.waiting >= maxQueuedFetches, state.flights[key] == nil {
                return .fail(WireError(.busy, "too many fetches queued"))
            }
            return .wait(startFlight(key, provider: provider, in: &state))
        }
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

    private func startFlight(
        _ key: TokenKey,
        provider: any TokenProvider,
        in state: inout State
    ) -> Task<FetchedToken, any Error> {
        if let flight = state.flights[key] { return flight }
        state.stats.fetches += 1
        let flight = Task { [self] in
            let result: Result<FetchedToken, any Error>
            do {
                result = .success(try await limiter.withPlace { try await provider.fetchToken(for: key) })
            } catch {
                result = .failure(error)
            }
            return try complete(key, with: result)
        }
        state.flights[key] = flight
        return flight
    }

    /// Stores a fetch's result; throws when the token cannot be served.
    private func complete(_ key: TokenKey, with result: Result<FetchedToken, any Error>) throws -> FetchedToken {
        let now = clock.monotonicSeconds
        let wall = clock.wallSeconds
        var result = result
        if case .success(let fetched) = result, !policy.isServable(remaining: fetched.expiresAt - wall) {
            result = .failure(ProviderError.failed("token expires in under \(Int(policy.servingFloor)) s"))
        }
        var metadata: Logger.Metadata = ["token_kind": "\(key.kind)", "token_id": "\(key.id)"]
        defer { state.withLock { $0.flights[key] = nil } }
        switch result {
        case .success(let fetched):
            let expiresAt = now + (fetched.expiresAt - wall)
            state.withLock { state in
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
            }
            metadata["token_fingerprint"] = "\(TokenFingerprint.of(fetched.token))"
            metadata["expires_in_s"] = "\(Int(fetched.expiresAt - wall))"
            logger.debug("fetched token", metadata: metadata)
            return fetched
        case .failure(let error):
            let providerError = error as? ProviderError ?? .failed("\(type(of: error))")
            let failures = state.withLock { state -> Int in
                var entry = state.table.peek(key) ?? CacheEntry(lastRead: now)
                entry.failures += 1
                entry.retryAfter = now + policy.backoff(failures: entry.failures, jitterUnit: random())
                if case .rejected(let text) = providerError {
                    entry.rejectedUntil = now + policy.rejectionMemory
                    entry.rejection = text
                }
                state.table.set(key, entry, capacity: maxEntries)
                state.stats.fetchErrors += 1
                state.stats.lastFailureAt = now
                state.stats.lastFailure = "\(key.kind): \(providerError)"
                return entry.failures
            }
            metadata["provider_status"] = "\(providerError)"
            metadata["failures"] = "\(failures)"
            logger.warning("token fetch failed", metadata: metadata)
            throw providerError
        }
    }

    private func outcome(
        of flight: Task<FetchedToken, any Error>,
        for key: TokenKey,
        fallBackToCached: Bool
    ) async -> Outcome {
        do {
            let fetched = try await flight.value
            return .success(ServedToken(token: fetched.token, expiresAt: Int64(fetched.expiresAt.rounded(.down))))
        } catch {
            let now = clock.monotonicSeconds
            if fallBackToCached {
                let cached = state.withLock { state -> ServedToken? in
                    guard let entry = state.table.peek(key), policy.isServable(remaining: entry.remaining(at: now))
                    else { return nil }
                    state.stats.servedAfterFailure += 1
                    return served(entry)
                }
                if let cached { return .success(cached) }
            }
            switch error as? ProviderError {
            case .rejected(let text): return .failure(WireError(.rejected, text))
            case .failed(let text): return .failure(WireError(.unavailable, text))
            case nil: return .failure(WireError(.unavailable, "fetch failed"))
            }
        }
    }

    private func served(_ entry: CacheEntry) -> ServedToken {
        ServedToken(token: entry.token ?? "", expiresAt: entry.expiresAtUnix)
    }

    private func unknownKind(_ kind: String) -> WireError {
        WireError(.badKind, "kind \(kind) is not configured; configured: \(kinds.joined(separator: ","))")
    }
}
