import Logging
import Synchronization
import TokenWire

/// The fetches: at most one in flight per key (singleflight), each stored in the token store when
/// it ends, and each belonging to its kind's generation so that a reload can supersede it.
///
/// Each kind has a lane of its own (``AsyncLimiter``): its own places at its provider and its own
/// bound on fetches waiting for one, so a slow or flooded kind never holds up another's fetches;
/// in a lane, background refreshes of tokens in use go before first fetches, and `WARM` fetches
/// after them. A first fetch that every waiter has left (its connections closed) while it still
/// waits for a place is cancelled; and one uid may have only so many first fetches waiting at once.
///
/// A fetch whose provider has a ``SignatureBudget`` first waits for a permit, in its
/// ``FetchPriority`` (GET, refresh, WARM), then for its place in the lane; both waits count as
/// queued. A fetch a request started waits at most ``FetchLimits/budgetWait`` for its permit:
/// then it ends without a result (nothing recorded: no back-off, no provider failure) and its
/// waiters get ``EngineFailure/overBudget(kind:retryAfter:)``. A request that joins a fetch
/// raises it to GET priority, wherever it waits.
///
/// It also holds the runtime in force and applies reloads, under its lock, to itself and to
/// every store shard, so a fetch never starts on one generation and is judged on another.
final class FetchCoordinator: Sendable {
    /// One fetch in flight for a key.
    struct Flight: Sendable {
        var task: Task<FetchedToken, any Error>
        /// The kind's generation when the fetch started.
        var generation: Int
        /// Tells this flight from an earlier or later one of the same key.
        var number: UInt64
    }

    /// A flight and what decides whether it may be cancelled.
    struct InFlight {
        var flight: Flight
        /// Requests that asked for it and have not left (their tasks were not cancelled).
        var waiters: Int
        /// A background refresh or a `WARM` fetch: never cancelled for want of waiters.
        var isBackground: Bool
        /// A `WARM` fetch no request has joined: counts in its kind's `WARM` bound while queued.
        var isWarm: Bool
        /// Its place in the budget's and the lane's queues.
        var ticket: FetchTicket
        /// Where it waits: its kind's lane and its provider's budget, if any.
        var lane: AsyncLimiter
        var budget: SignatureBudget?
        /// Still waiting for a permit or a place at the provider.
        var queued = true
        /// The uid whose request started it (first fetches only); counts in its bound while queued.
        var owner: UInt32?
    }

    /// A fetch whose kind's provider was replaced while it ran: nothing it returned is stored.
    struct SupersededFetch: Error {}

    struct RetiringProvider {
        var provider: any TokenProvider
        var flights: [Task<FetchedToken, any Error>]
    }

    struct State {
        var runtime: EngineRuntime
        var nextGeneration = 1
        var flights: [TokenKey: InFlight] = [:]
        var nextFlight: UInt64 = 0
        /// Each configured kind's lane.
        var lanes: [String: AsyncLimiter] = [:]
        /// Queued first fetches by the uid that started them.
        var queuedByOwner: [UInt32: Int] = [:]
        /// Queued fetches by kind (counted here, under the lock, so a burst cannot pass the bound).
        var queuedByKind: [String: Int] = [:]
        /// Queued `WARM` fetches by kind (also in `queuedByKind`).
        var queuedWarmByKind: [String: Int] = [:]
        var warmFetches = 0
        /// First fetches cancelled because every request waiting on them had gone.
        var abandoned = 0
        /// Providers retired by a reload, with the flights they still serve.
        var retiring: [RetiringProvider] = []
        var fetches = 0
        var fetchErrors = 0
        var backgroundRefreshes = 0
        var lastFailureAt: MonotonicInstant?
        var lastFailure: String?
        /// Each configured kind's provider health.
        var health: [String: ProviderHealth] = [:]
    }

    let state: Mutex<State>
    let store: TokenStore
    let limits: FetchLimits
    let clock: any AgentClock
    let logger: Logger
    let metrics: EngineMetrics

    init(
        runtime: EngineRuntime,
        store: TokenStore,
        limits: FetchLimits,
        clock: any AgentClock,
        logger: Logger,
        metrics: EngineMetrics = EngineMetrics()
    ) {
        var initial = State(runtime: runtime)
        for kind in runtime.kinds { initial.lanes[kind] = AsyncLimiter(limit: limits.concurrentPerKind) }
        self.state = Mutex(initial)
        self.metrics = metrics
        metrics.prepare(kinds: runtime.kinds)
        self.store = store
        self.limits = limits
        self.clock = clock
        self.logger = logger
    }

    /// The runtime in force.
    var runtime: EngineRuntime { state.withLock { $0.runtime } }

    /// What ``flight(for:owner:unless:)`` did.
    enum FlightStart {
        /// A flight to wait for: the one in progress, joined, or one just started.
        case waiting(Flight)
        /// Started none: a fetch of the key ended since the caller's decision (`unless` held).
        case recordedSince
        /// Started none: this failure answers the request.
        case refused(EngineFailure)
    }

    /// Joins the fetch of `key` in flight, or starts one (for `owner`, the requesting uid), unless
    /// no flight is left to join and `recordedSince` says a fetch has recorded a token since the
    /// caller decided to fetch (it is asked under the coordinator's lock, so a flight cannot end
    /// in between: a fetch records its result before its flight ends). Refused as `busy` when too
    /// many of the kind's fetches, or of `owner`'s first fetches, already wait for a place. The
    /// caller waits on the flight; a caller that leaves tells ``left(_:flight:)``.
    func flight(for key: TokenKey, owner: UInt32? = nil, unless recordedSince: () -> Bool) -> FlightStart {
        // The parser refuses these ids first; this keeps any other caller of the engine from
        // sending one to a provider or a signer.
        if let problem = TokenIdentifier.keyProblem(kind: key.kind, id: key.id.utf8) {
            return .refused(.rejected("\(problem); never fetched"))
        }
        return state.withLock { state in
            if let flight = join(key, in: &state) { return .waiting(flight) }
            if recordedSince() { return .recordedSince }
            guard state.lanes[key.kind] != nil else { return .refused(state.runtime.unknownKind(key.kind)) }
            guard state.queuedByKind[key.kind, default: 0] < limits.queuedPerKind else {
                return .refused(.busy(kind: key.kind))
            }
            if let owner, state.queuedByOwner[owner, default: 0] >= limits.queuedPerUID {
                return .refused(.busyForUID(owner))
            }
            guard let flight = start(key, owner: owner, priority: .get, in: &state) else {
                return .refused(state.runtime.unknownKind(key.kind))
            }
            return .waiting(flight)
        }
    }

    /// The fetch of `key` in flight, if there is one; never starts one.
    func flightInProgress(for key: TokenKey) -> Flight? {
        state.withLock { join(key, in: &$0) }
    }

    /// Joins the flight of `key` for a request: one more waiter, and the flight raised to GET
    /// priority wherever it waits.
    private func join(_ key: TokenKey, in state: inout State) -> Flight? {
        guard var record = state.flights[key] else { return nil }
        record.waiters += 1
        if record.ticket.promote() {
            if record.isWarm, record.queued { Self.decrement(&state.queuedWarmByKind, key.kind) }
            record.isWarm = false
            record.budget?.promote(record.ticket)
            record.lane.promote(record.ticket)
        }
        state.flights[key] = record
        metrics.recordWaiter()
        return record.flight
    }

    /// A request waiting on `flight` of `key` has gone (its task was cancelled: the connection
    /// closed). A first fetch that no request waits for any more and that still waits for a place
    /// is cancelled: nobody would read what it brings, and it holds its kind's queue.
    func left(_ key: TokenKey, flight: Flight) {
        let abandoned = state.withLock { state -> Task<FetchedToken, any Error>? in
            guard var record = state.flights[key], record.flight.number == flight.number else { return nil }
            record.waiters -= 1
            guard record.waiters <= 0, !record.isBackground, record.queued else {
                state.flights[key] = record
                return nil
            }
            state.flights[key] = nil
            releaseQueued(record, key: key, in: &state)
            state.abandoned += 1
            return record.flight.task
        }
        abandoned?.cancel()
    }

    /// Gives back the places a queued fetch took in its kind's and its owner's bounds.
    func releaseQueued(_ record: InFlight, key: TokenKey, in state: inout State) {
        guard record.queued else { return }
        Self.decrement(&state.queuedByKind, key.kind)
        if record.isWarm { Self.decrement(&state.queuedWarmByKind, key.kind) }
        guard let owner = record.owner else { return }
        Self.decrement(&state.queuedByOwner, owner)
    }

    private static func decrement<Key: Hashable>(_ counts: inout [Key: Int], _ key: Key) {
        let count = counts[key, default: 1] - 1
        counts[key] = count > 0 ? count : nil
    }

    /// The flight of `key` numbered `number` got its place at the provider; `false` when it is
    /// no longer the key's flight (dropped, or superseded by a reload): then it must not fetch.
    private func placed(_ key: TokenKey, number: UInt64) -> Bool {
        state.withLock { state in
            guard var record = state.flights[key], record.flight.number == number else { return false }
            guard record.queued else { return true }
            releaseQueued(record, key: key, in: &state)
            record.queued = false
            state.flights[key] = record
            return true
        }
    }

    /// Whether the flight of `key` numbered `number` is still the key's.
    private func isCurrent(_ key: TokenKey, number: UInt64) -> Bool {
        state.withLock { $0.flights[key]?.flight.number == number }
    }

    /// Starts background refreshes of `keys` that have no fetch in flight; returns how many started.
    func refresh(_ keys: [TokenKey]) -> Int {
        guard !keys.isEmpty else { return 0 }
        return state.withLock { state in
            var started = 0
            for key in keys where state.flights[key] == nil {
                guard start(key, owner: nil, priority: .refresh, in: &state) != nil else { continue }
                state.backgroundRefreshes += 1
                started += 1
            }
            return started
        }
    }

    /// Starts the fetch of `key`, queued at `priority`: a GET's (a request waits for it, which
    /// counts as its first waiter), a background refresh's or a `WARM`'s (nobody waits for it).
    /// A `WARM` fetch gives back a place in `allowance` when it ends.
    func start(
        _ key: TokenKey,
        owner: UInt32?,
        priority: FetchPriority,
        allowance: WarmAllowance? = nil,
        in state: inout State
    ) -> Flight? {
        guard let provider = state.runtime.providers[key.kind], let lane = state.lanes[key.kind] else { return nil }
        state.fetches += 1
        state.nextFlight += 1
        let number = state.nextFlight
        let generation = state.runtime.generations[key.kind] ?? 0
        let ticket = FetchTicket(priority: priority, owner: owner)
        let budget = provider.signatureBudget
        // A request waits for its permit only so long; refreshes and WARMs as long as it takes (a
        // refresh that ended without a result would be started again a second later anyway).
        let deadline = priority == .get && budget != nil ? clock.now + limits.budgetWait : nil
        let task = Task { [self] in
            defer { allowance?.giveBack() }
            let result: Result<FetchedToken, ProviderError>
            do {
                if let budget { try await budget.permit(for: ticket, deadline: deadline) }
                // A permit is counted at the API from when its request leaves: the provider says
                // when (``SignaturePermit/spend()``); one that does not, or a fetch that ends first
                // (cancelled while it waited for its place), spends it as it ends.
                defer { budget?.sent(ticket) }
                let permit = budget.map { SignaturePermit(budget: $0, ticket: ticket) }
                result = .success(
                    try await lane.withPlace(ticket: ticket) {
                        // Dropped while it waited (or between its place and this): no fetch.
                        guard placed(key, number: number) else { throw CancellationError() }
                        let started = ContinuousClock.now
                        defer {
                            let elapsed = (ContinuousClock.now - started).components
                            metrics.recordFetch(
                                kind: key.kind,
                                nanoseconds: elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000
                            )
                        }
                        return try await SignaturePermit.$current.withValue(permit) {
                            try await provider.fetchToken(for: key)
                        }
                    }
                )
            } catch let error as ProviderError {
                result = .failure(error)
            } catch is CancellationError {
                finish(key, number: number)
                throw SupersededFetch()
            } catch let passed as SignatureBudget.DeadlinePassed {
                // Nothing was asked of the provider: nothing is recorded, nobody is backed off.
                finish(key, number: number)
                logger.debug(
                    "no signature permit within the wait; the fetch is given up",
                    metadata: ["token_kind": "\(key.kind)", "token_id": "\(key.id)"]
                )
                throw EngineFailure.overBudget(kind: key.kind, retryAfter: passed.retryAfter)
            } catch {
                result = .failure(.failed("\(type(of: error))"))
            }
            return try complete(key, generation: generation, number: number, with: result)
        }
        let flight = Flight(task: task, generation: generation, number: number)
        state.flights[key] = InFlight(
            flight: flight,
            waiters: priority == .get ? 1 : 0,
            isBackground: priority != .get,
            isWarm: priority == .warm,
            ticket: ticket,
            lane: lane,
            budget: budget,
            owner: owner
        )
        state.queuedByKind[key.kind, default: 0] += 1
        if priority == .warm {
            state.queuedWarmByKind[key.kind, default: 0] += 1
            state.warmFetches += 1
        }
        if let owner { state.queuedByOwner[owner, default: 0] += 1 }
        return flight
    }

    /// Stores a fetch's result, ends its flight, and logs it; throws when there is no token to serve.
    private func complete(
        _ key: TokenKey,
        generation: Int,
        number: UInt64,
        with result: Result<FetchedToken, ProviderError>
    ) throws -> FetchedToken {
        // A flight dropped by its last waiter records nothing: no failure, no back-off for others.
        guard isCurrent(key, number: number) else { throw SupersededFetch() }
        let now = clock.now
        let unixNow = clock.unixNow
        let recorded = store.record(key, generation: generation, result: result, now: now, unixNow: unixNow)
        finish(key, number: number)
        var metadata: Logger.Metadata = ["token_kind": "\(key.kind)", "token_id": "\(key.id)"]
        switch recorded {
        case .stored(let fetched):
            state.withLock { state in
                state.health[key.kind, default: ProviderHealth(kind: key.kind)].recordSuccess(at: now)
            }
            metadata["token_fingerprint"] = "\(TokenFingerprint.of(fetched.token))"
            metadata["expires_in_s"] = "\(Int(saturating: fetched.expiresAt - unixNow))"
            logger.debug("fetched token", metadata: metadata)
            return fetched
        case .superseded:
            logger.debug("fetch superseded by a reload; its result is not stored", metadata: metadata)
            throw SupersededFetch()
        case .failed(let error):
            state.withLock { state in
                state.fetchErrors += 1
                state.lastFailureAt = now
                state.lastFailure = "\(key.kind): \(error)"
                state.health[key.kind, default: ProviderHealth(kind: key.kind)].recordFailure(error, at: now)
            }
            metrics.recordFailure(kind: key.kind, reason: FetchFailureReason(error))
            metadata["provider_status"] = "\(error)"
            logger.warning("token fetch failed", metadata: metadata)
            throw error
        }
    }

    /// Ends the flight of `key` if it is still the one numbered `number`.
    func finish(_ key: TokenKey, number: UInt64) {
        state.withLock { state in
            guard let record = state.flights[key], record.flight.number == number else { return }
            releaseQueued(record, key: key, in: &state)
            state.flights[key] = nil
        }
    }

    /// The generation of `kind` now.
    func generation(of kind: String) -> Int? { state.withLock { $0.runtime.generations[kind] } }

    /// Sets the fetch counters in `stats`: started, failed, background, in flight, and the last
    /// failure.
    func addCounts(to stats: inout EngineStatistics) {
        state.withLock { state in
            stats.fetches = state.fetches
            stats.fetchErrors = state.fetchErrors
            stats.backgroundRefreshes = state.backgroundRefreshes
            stats.inFlight = state.flights.count
            stats.abandonedFetches = state.abandoned
            stats.warmFetches = state.warmFetches
            stats.lastFailureAt = state.lastFailureAt
            stats.lastFailure = state.lastFailure
        }
    }

    /// The provider health of every configured kind, sorted by kind.
    func providerHealth() -> [ProviderHealth] {
        state.withLock { state in
            state.runtime.kinds.map { state.health[$0] ?? ProviderHealth(kind: $0) }
        }
    }
}

// MARK: WARM: fetches started ahead of need, at the lowest priority, that nobody waits for; and the
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

// MARK: Reloads: new providers and policy put in force, under the coordinator's lock, in itself and in
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
