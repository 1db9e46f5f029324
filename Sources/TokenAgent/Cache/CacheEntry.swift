/// What the agent knows about one (kind, id): the token it holds, if any, the provider's recent
/// failures, and when the scheduler looks at it next.
///
/// What a cached GET reads and writes comes first (the token, its expiries, when it was fetched
/// and last read, the reads, the storage's hint): those fields share the entry's first cache lines.
struct CacheEntry {
    /// The token, if the entry holds one, and where it is kept.
    var token = HeldToken.none
    /// The token's expiry as the token says it (what the wire reports).
    var unixExpiry = UnixTime(seconds: 0)
    /// The token's expiry on the monotonic clock: what every decision uses.
    var expiry = MonotonicInstant.origin
    /// When the token was fetched.
    var fetchedAt = MonotonicInstant.origin
    /// When a client last asked for this key.
    var lastRead: MonotonicInstant
    /// GETs of this key since its token was fetched (for `INFO`).
    var reads = 0
    /// The storage's note of where it keeps a ``HeldToken/inStorage`` token (see
    /// ``TokenStorage/withToken(kind:id:hint:_:)``); zero when it has none.
    var storageHint: UInt64 = 0
    /// When a background refresh is due.
    var refreshAt = MonotonicInstant.origin
    /// Consecutive provider failures.
    var failures = 0
    /// No fetch before this instant (back-off).
    var retryAfter = MonotonicInstant.origin
    /// The provider's refusal is remembered until this instant.
    var rejectedUntil = MonotonicInstant.origin
    /// The provider's refusal text.
    var rejection = ""
    /// When a REFRESH last reported the cached token refused and a replacement fetch started
    /// (``MonotonicInstant/origin``: never): at most one such fetch per re-fetch guard window.
    var reportedAt = MonotonicInstant.origin
    /// The last fetch failure (for `INFO`): its text, empty when none.
    var lastError = ""
    /// When the last fetch failure happened.
    var lastErrorAt = MonotonicInstant.origin
    /// The last fetch failure's reason.
    var lastErrorReason: FetchFailureReason?
    /// The instant of this entry's record in its shard's due queue; ``MonotonicInstant/origin``
    /// when it has none (not an optional: the entry is kept as small as it can be).
    var scheduled = MonotonicInstant.origin

    init(lastRead: MonotonicInstant) {
        self.lastRead = lastRead
    }

    /// Holds `token` (kept where it says), which expires at `unixExpiry` (`remaining` seconds after
    /// `now`), as fetched at `now`, with its background refresh planned by `policy`. Failure
    /// memory is left as it is.
    mutating func hold(
        _ token: HeldToken,
        unixExpiry: UnixTime,
        remaining: Double,
        now: MonotonicInstant,
        policy: RefreshPolicy,
        jitterUnit: Double
    ) {
        self.token = token
        self.unixExpiry = unixExpiry
        expiry = now + remaining
        fetchedAt = now
        reads = 0
        refreshAt = policy.refreshTime(fetchedAt: now, expiry: expiry, jitterUnit: jitterUnit)
    }

    /// Seconds the token has left at `now` on the monotonic clock (zero when there is none).
    func remaining(at now: MonotonicInstant) -> Double { token.isHeld ? expiry - now : 0 }

    /// Seconds the token has left at `now`, by both clocks: what its monotonic deadline leaves,
    /// and what its `exp` leaves by the wall clock reading `wall`, whichever is less (zero when
    /// there is none). A wall clock stepped forward since the fetch (NTP correcting a clock that
    /// was behind) makes a token expire sooner than its deadline said; a step back never makes
    /// one last longer.
    func remaining(at now: MonotonicInstant, wall: UnixTime) -> Double {
        token.isHeld ? min(expiry - now, unixExpiry - wall) : 0
    }

    /// The token's lifetime as fetched, seconds.
    var lifetime: Double { expiry - fetchedAt }
}
