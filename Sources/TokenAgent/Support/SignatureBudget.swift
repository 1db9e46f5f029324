import Synchronization
import TokenWire

/// A budget of signatures per minute for the issuers of one quota (Google's IAM Credentials API
/// counts `signJwt` calls per project and minute): every fetch of a provider that has one waits
/// for a permit before it takes its place in its kind's lane.
///
/// It is a token bucket with a cap. The bucket holds at most ``burst`` permits (a sixth of the
/// minute's, at least 1: ten seconds' worth) and refills at `perMinute / 60` a second, so a burst
/// of fetches (start-up, a big `WARM`, a reload that drops a kind's tokens) gets a sixth of the
/// minute at once and the rest spread evenly over the time after it. The cap makes it exact where
/// it counts, at the API: a permit is granted only while fewer than `perMinute` signatures were
/// sent in the last 61 s or are granted and not yet sent (``sent(_:)``, called as the request
/// leaves: ``SignaturePermit/spend()``), so no 60-second window at the API holds more than `perMinute`, however the bucket, the
/// arrivals and the lane's waits fall, with a second to spare for the network. Sustained demand is
/// served at `perMinute` per 61 s (98% of the rate).
///
/// Past the budget, waiters are served by ``FetchPriority`` (GET, then refresh, then WARM), the
/// owners taking turns within one (``PriorityWaiters``); a ticket promoted while it waits moves to the end of the
/// GET queue. A waiter whose deadline passes leaves with ``DeadlinePassed``; one whose task is
/// cancelled leaves at once with `CancellationError`. A permit is spent when granted (the bucket
/// never gets it back, whatever the fetch then does); it counts in the cap's window from when
/// its request leaves.
///
/// Time is read from an ``AgentClock``. The budget wakes itself (a timer task) when the next
/// permit is due or a deadline passes; with `wakesItself: false` (tests, with a clock they move
/// by hand) nothing happens between calls until ``serveDue()`` is called.
public final class SignatureBudget: Sendable {
    /// What the budget has done since it was made.
    public struct Counters: Sendable, Hashable {
        /// Permits granted: the signatures made (or about to be).
        public var signatures = 0
        /// Waiters now.
        public var queued = 0
        /// Waits that found no permit at once and had to queue.
        public var throttled = 0
        /// Waiters that left because their deadline passed.
        public var timedOut = 0

        /// Zero counters.
        public init() {}
    }

    /// A wait whose deadline passed before a permit was free: nothing was signed.
    public struct DeadlinePassed: Error, Sendable, Hashable {
        /// Whole seconds (at least 1) until a permit is likely free for a GET.
        public var retryAfter: Int
    }

    private struct Waiter {
        var continuation: CheckedContinuation<Void, any Error>
        var deadline: Int64?
    }

    private struct State {
        /// Permits in the bucket, in units of 1/60,000,000,000 permit: it gains `perMinute` units
        /// a nanosecond, exactly.
        var level: Int64
        var refilledAt: Int64
        /// When each signature of the last 61 s was sent, oldest first from `recentHead`.
        var recent: [Int64] = []
        /// Tickets granted a permit whose request has not been sent yet.
        var sending: Set<UInt64> = []
        var recentHead = 0
        var waiters = PriorityWaiters<Waiter>()
        /// (deadline, ticket) of waiters with a deadline, earliest first; stale ones are skipped.
        var deadlines: [(at: Int64, number: UInt64)] = []
        var deadlineHead = 0
        var counters = Counters()
        /// When the timer task last armed fires.
        var wakeAt: Int64?

        var recentCount: Int { recent.count - recentHead }
    }

    private static let unit: Int64 = 60_000_000_000
    /// The cap's window: a minute, and a second for a request's way to the API.
    private static let window: Int64 = 61_000_000_000

    /// Signatures allowed in any 60 seconds (1 to 1,000,000).
    public let perMinute: Int
    /// Permits granted at once after a quiet spell: `max(1, perMinute / 6)`.
    public let burst: Int
    private let clock: any AgentClock
    private let wakesItself: Bool
    private let state: Mutex<State>

    /// A budget of `perMinute` signatures a minute (clamped to 1…1,000,000), full at first; or,
    /// carrying `previous` (a reload that changed the kind's budget), holding what it sent in the
    /// cap's window and granted but not sent yet, and no more permits in its bucket than it had,
    /// so a reload never starts a fresh minute.
    public init(
        perMinute: Int,
        clock: any AgentClock = SystemAgentClock(),
        wakesItself: Bool = true,
        carrying previous: SignatureBudget? = nil
    ) {
        let perMinute = min(max(perMinute, 1), 1_000_000)
        self.perMinute = perMinute
        self.burst = max(1, perMinute / 6)
        self.clock = clock
        self.wakesItself = wakesItself
        let now = Self.nanoseconds(clock)
        var state = State(level: Int64(burst) * Self.unit, refilledAt: now)
        if let previous {
            previous.state.withLock { old in
                state.level = min(state.level, old.level)
                state.recent = Array(old.recent[old.recentHead...]) + Array(repeating: now, count: old.sending.count)
            }
        }
        self.state = Mutex(state)
    }

    private static func nanoseconds(_ clock: any AgentClock) -> Int64 {
        Int64(saturating: (clock.monotonicSeconds * 1e9).rounded(.down))
    }

    /// The counters now.
    public var counters: Counters {
        state.withLock { state in
            var counters = state.counters
            counters.queued = state.waiters.count
            return counters
        }
    }

    /// Whole seconds (at least 1) until a permit is likely free for a new GET: the next permit's
    /// time plus one interval for each GET already waiting.
    public var retryAfter: Int {
        let now = Self.nanoseconds(clock)
        return state.withLock { state in
            refill(&state, now: now)
            let ahead = Int64(state.waiters.count(atOrAbove: 0))
            let interval = Self.unit / Int64(perMinute)
            let at = nextGrant(state, now: now) + ahead * interval
            return max(1, Int(saturating: (Double(at - now) / 1e9).rounded(.up)))
        }
    }

    /// Waits until a permit is granted to `ticket`, in its priority; throws ``DeadlinePassed``
    /// when `deadline` (on this budget's clock, which should be the engine's) passes first,
    /// `CancellationError` when the task is cancelled. When the permit and the deadline are both
    /// due at one look, the permit wins.
    public func permit(for ticket: FetchTicket, deadline: MonotonicInstant? = nil) async throws {
        try Task.checkCancellation()
        let number = ticket.number
        let deadlineNanoseconds = deadline.map { Int64(saturating: ($0.seconds * 1e9).rounded(.down)) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Next { case wait, grant, cancel, late(Int) }
                let now = Self.nanoseconds(clock)
                let next = state.withLock { state -> Next in
                    if Task.isCancelled { return .cancel }
                    refill(&state, now: now)
                    // Only with nobody waiting: a permit free now is the first waiter's.
                    if state.waiters.isEmpty, canGrant(&state, now: now) {
                        grant(&state, number, now: now)
                        return .grant
                    }
                    if let deadlineNanoseconds, deadlineNanoseconds <= now {
                        state.counters.timedOut += 1
                        return .late(retryAfter(state, now: now))
                    }
                    state.counters.throttled += 1
                    let waiter = Waiter(continuation: continuation, deadline: deadlineNanoseconds)
                    // The level is read under the lock: a promotion before this is seen here, one
                    // after it finds the waiter.
                    state.waiters.add(number, waiter, level: Self.level(ticket), owner: ticket.owner)
                    if let deadlineNanoseconds { insertDeadline(&state, deadlineNanoseconds, number) }
                    return .wait
                }
                switch next {
                case .wait: armTimer(now: now)
                case .grant: continuation.resume()
                case .cancel: continuation.resume(throwing: CancellationError())
                case .late(let retryAfter): continuation.resume(throwing: DeadlinePassed(retryAfter: retryAfter))
                }
            }
        } onCancel: {
            let cancelled = state.withLock { $0.waiters.remove(number) }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    /// The request `ticket` was granted a permit for leaves now (or never will: a fetch cancelled
    /// after its permit calls this too, and its permit counts as spent now). From here its
    /// signature counts in the cap's window by this time. Calling it again, or for a ticket
    /// without a permit, does nothing.
    public func sent(_ ticket: FetchTicket) {
        let now = Self.nanoseconds(clock)
        state.withLock { state in
            guard state.sending.remove(ticket.number) != nil else { return }
            state.recent.append(now)
        }
    }

    /// Moves `ticket`, if it waits here, to the end of the GET queue (after a promotion).
    public func promote(_ ticket: FetchTicket) {
        state.withLock { $0.waiters.raise(ticket.number, to: Self.level(ticket)) }
    }

    /// Grants the permits due now to the first waiters, and sends away those whose deadline has
    /// passed. The timer calls it; a test with `wakesItself: false` calls it after moving its
    /// clock.
    public func serveDue() {
        let now = Self.nanoseconds(clock)
        var granted: [CheckedContinuation<Void, any Error>] = []
        var late: [CheckedContinuation<Void, any Error>] = []
        let retryAfter = state.withLock { state -> Int in
            refill(&state, now: now)
            while !state.waiters.isEmpty, canGrant(&state, now: now), let (number, waiter) = state.waiters.next() {
                grant(&state, number, now: now)
                granted.append(waiter.continuation)
            }
            while state.deadlineHead < state.deadlines.count, state.deadlines[state.deadlineHead].at <= now {
                let number = state.deadlines[state.deadlineHead].number
                state.deadlineHead += 1
                guard let waiter = state.waiters.remove(number) else { continue }
                state.counters.timedOut += 1
                late.append(waiter.continuation)
            }
            if state.deadlineHead == state.deadlines.count
                || (state.deadlineHead > 1024
                    && state.deadlineHead * 2 > state.deadlines.count)
            {
                state.deadlines.removeFirst(state.deadlineHead)
                state.deadlineHead = 0
            }
            return late.isEmpty ? 0 : self.retryAfter(state, now: now)
        }
        for continuation in granted { continuation.resume() }
        for continuation in late { continuation.resume(throwing: DeadlinePassed(retryAfter: retryAfter)) }
        armTimer(now: now)
    }

    // MARK: The bucket and the cap

    /// The budget's level of a ticket: GETs and promoted tickets, then refreshes, then WARMs.
    private static func level(_ ticket: FetchTicket) -> Int { ticket.priority.rawValue }

    private func refill(_ state: inout State, now: Int64) {
        guard now > state.refilledAt else { return }
        let capacity = Int64(burst) * Self.unit
        // Past the time to fill the bucket from empty, more time adds nothing (and cannot overflow).
        let elapsed = min(now - state.refilledAt, capacity / Int64(perMinute) + 1)
        state.level = min(capacity, state.level + elapsed * Int64(perMinute))
        state.refilledAt = now
    }

    /// Drops the grants older than the window; whether a permit may be granted now.
    private func canGrant(_ state: inout State, now: Int64) -> Bool {
        while state.recentCount > 0, state.recent[state.recentHead] <= now - Self.window { state.recentHead += 1 }
        if state.recentHead > 1024, state.recentHead * 2 > state.recent.count {
            state.recent.removeFirst(state.recentHead)
            state.recentHead = 0
        }
        return state.level >= Self.unit && state.recentCount + state.sending.count < perMinute
    }

    private func grant(_ state: inout State, _ number: UInt64, now: Int64) {
        state.level -= Self.unit
        state.sending.insert(number)
        state.counters.signatures += 1
    }

    /// When the next permit can be granted (`now` or later), ignoring the waiters.
    private func nextGrant(_ state: State, now: Int64) -> Int64 {
        var at = now
        if state.level < Self.unit {
            let missing = Self.unit - state.level
            at = now + (missing + Int64(perMinute) - 1) / Int64(perMinute)
        }
        let excess = state.recentCount + state.sending.count - perMinute + 1
        if excess > 0 {
            if excess <= state.recentCount {
                // The newest of the sends that must leave the window for the count to drop below
                // the cap.
                at = max(at, state.recent[state.recentHead + excess - 1] + Self.window)
            } else {
                // Permits still to be sent fill the cap: look again in a second.
                at = max(at, now + 1_000_000_000)
            }
        }
        return at
    }

    private func retryAfter(_ state: State, now: Int64) -> Int {
        let ahead = Int64(state.waiters.count(atOrAbove: 0))
        let at = nextGrant(state, now: now) + ahead * (Self.unit / Int64(perMinute))
        return max(1, Int(saturating: (Double(at - now) / 1e9).rounded(.up)))
    }

    private func insertDeadline(_ state: inout State, _ at: Int64, _ number: UInt64) {
        var index = state.deadlines.count
        while index > state.deadlineHead, state.deadlines[index - 1].at > at { index -= 1 }
        state.deadlines.insert((at, number), at: index)
    }

    // MARK: Waking

    /// Arms the timer for the next moment something can change for the waiters, unless it is
    /// already armed for that moment or earlier.
    private func armTimer(now: Int64) {
        guard wakesItself else { return }
        let wake = state.withLock { state -> Int64? in
            guard !state.waiters.isEmpty else { return nil }
            var at = nextGrant(state, now: now)
            if state.deadlineHead < state.deadlines.count { at = min(at, state.deadlines[state.deadlineHead].at) }
            if let armed = state.wakeAt, armed <= at, armed > now { return nil }
            state.wakeAt = at
            return at
        }
        guard let wake else { return }
        let delay = UInt64(max(wake - now, 1_000_000))
        Task { [weak self] in
            try? await Task.sleep(nanoseconds: delay)
            guard let self else { return }
            self.state.withLock { if $0.wakeAt == wake { $0.wakeAt = nil } }
            self.serveDue()
        }
    }
}
