import Logging
import Synchronization
import TokenWire

/// The host's access tokens from one Application Default Credentials source (a service-account
/// key file, a gcloud user's refresh token, or the metadata server), cached and fetched once for
/// every caller waiting. Made by ``HostCredentials``.
///
/// **Refresh.** A token of lifetime `L` (the reply's `expires_in`) is served from the cache until
/// `max(minimumRefreshMargin, refreshFraction × L)` before it expires (by default 60 s and 10 %:
/// six minutes before the end of an hour-long token, one minute before the end of a ten-minute
/// one); the next caller after that fetches a new one. Deadlines are kept on the monotonic clock,
/// so a wall-clock jump neither keeps a token too long nor throws one away.
///
/// **Singleflight.** One fetch at a time: callers that find no usable token while a fetch is under
/// way wait for that fetch. The fetch runs in a task of its own, so a caller that is cancelled
/// does not cancel it for the others. A fetch has a deadline, ``Tuning/timeout`` and a second
/// after it started (the exchange itself ends head and body within ``Tuning/timeout``): at the
/// deadline it ends as a transient failure for every caller
/// waiting on it (each of whom came after it started, so none waits past its own time-out) and
/// is cancelled; a caller that finds a flight past its deadline cancels it and starts a new one,
/// so a caller never queues behind a fetch that is already over time.
///
/// **Failures.** A failed fetch is not cached: every caller waiting on it gets its error and the
/// next caller fetches again (back-off is the caller's). While a token fetched earlier still has
/// ``Tuning/usableFloor`` seconds left, a *transient* failure to refresh it serves that token
/// instead (logged at debug), so a blip at the token endpoint inside the refresh window costs
/// nothing.
public final class HostAccessTokenSource: AccessTokenSource {
    /// The timing of fetches and refreshes.
    public struct Tuning: Sendable, Hashable {
        /// The least time before expiry at which a token is refreshed, seconds.
        public var minimumRefreshMargin: Double
        /// The part of a token's lifetime before its expiry at which it is refreshed, when that is
        /// more than ``minimumRefreshMargin``.
        public var refreshFraction: Double
        /// The least time a token must have left to be served when a refresh fails, seconds.
        public var usableFloor: Double
        /// The connect time-out of a fetch, seconds.
        public var connectTimeout: Double
        /// The time-out of a whole fetch, seconds.
        public var timeout: Double

        /// Creates a tuning; the defaults are the agent's.
        public init(
            minimumRefreshMargin: Double = 60,
            refreshFraction: Double = 0.1,
            usableFloor: Double = 10,
            connectTimeout: Double = 2,
            timeout: Double = 10
        ) {
            self.minimumRefreshMargin = minimumRefreshMargin
            self.refreshFraction = refreshFraction
            self.usableFloor = usableFloor
            self.connectTimeout = connectTimeout
            self.timeout = timeout
        }

        /// How long before its expiry a token of `lifetime` seconds is refreshed.
        public func refreshMargin(lifetime: Double) -> Double {
            max(minimumRefreshMargin, refreshFraction * lifetime)
        }
    }

    public let summary: String
    public let identity: String
    public let quotaProject: String?
    /// The timing of fetches and refreshes.
    public let tuning: Tuning

    private let exchange: AccessTokenExchange
    private let clock: any AgentClock
    private let logger: Logger
    private let state = Mutex(State())

    private struct Cached {
        var token: AccessToken
        /// When to fetch a new one, and when this one expires, on the monotonic clock.
        var refreshAt: MonotonicInstant
        var expiresAt: MonotonicInstant
    }

    private struct State {
        var cached: Cached?
        var flight: Task<Result<AccessToken, CredentialsError>, Never>?
        /// When the flight's time is up, on the monotonic clock.
        var flightDeadline: MonotonicInstant?
        /// Tells the flight in ``flight`` from one given up before it.
        var flightNumber = 0
        var fetches = 0
    }

    init(
        grant: AccessTokenGrant,
        summary: String,
        identity: String? = nil,
        tuning: Tuning,
        clock: any AgentClock,
        logger: Logger
    ) {
        self.summary = summary
        self.identity = identity ?? summary
        self.tuning = tuning
        self.clock = clock
        self.logger = logger
        switch grant {
        case .authorizedUser(let user): quotaProject = user.quotaProject
        case .externalAccount(let exchange): quotaProject = exchange.account.quotaProject
        default: quotaProject = nil
        }
        exchange = AccessTokenExchange(
            grant: grant,
            connectTimeout: tuning.connectTimeout,
            timeout: tuning.timeout,
            clock: clock
        )
    }

    /// The longest a fetch is waited on, seconds: its time-out (for federation, that of each of
    /// its calls: ``ExternalAccountExchange/longestFetch(timeout:)``) and a second more, so the
    /// exchange's own error (which tells a silent server from a dripping one) normally comes first.
    private var flightTime: Double {
        if case .externalAccount(let federation) = exchange.grant {
            return federation.longestFetch(timeout: tuning.timeout) + 1
        }
        return tuning.timeout + 1
    }

    /// The federation's counts, when the host's identity is federated.
    public var federationStatistics: FederationStatistics? {
        if case .externalAccount(let federation) = exchange.grant { return federation.statistics }
        return nil
    }

    /// How many fetches were started.
    public var fetchCount: Int { state.withLock { $0.fetches } }

    public func accessToken() async throws(CredentialsError) -> AccessToken {
        let now = clock.now
        let step = state.withLock { state -> Step in
            if let cached = state.cached, now < cached.refreshAt { return .ready(cached.token) }
            if let flight = state.flight {
                guard let deadline = state.flightDeadline, now >= deadline else { return .wait(flight) }
                // Over its time: whatever it still waits for, it is not waited on again.
                flight.cancel()
            }
            state.fetches += 1
            state.flightNumber += 1
            let number = state.flightNumber
            let flight = Task { await self.fetchAndCache(number: number) }
            state.flight = flight
            state.flightDeadline = now + flightTime
            return .wait(flight)
        }
        switch step {
        case .ready(let token): return token
        case .wait(let flight): return try await flight.value.get()
        }
    }

    private enum Step {
        case ready(AccessToken)
        case wait(Task<Result<AccessToken, CredentialsError>, Never>)
    }

    /// One fetch: caches its token, or falls back to a cached token that is still usable.
    private func fetchAndCache(number: Int) async -> Result<AccessToken, CredentialsError> {
        let started = clock.now
        let startedWall = clock.unixNow
        let exchange = exchange
        let deadline = ContinuousClock.now + .milliseconds(Int64(flightTime * 1000))
        let result =
            await untilDeadline(deadline) { () -> Result<FetchedAccessToken, CredentialsError> in
                do throws(CredentialsError) {
                    return .success(try await exchange.fetch())
                } catch {
                    return .failure(error)
                }
            }
            ?? .failure(
                CredentialsError(
                    .transient,
                    "\(exchange.grant.endpoint): timed out after \(OutboundFailure.seconds(flightTime)) s"
                )
            )
        return state.withLock { state -> Result<AccessToken, CredentialsError> in
            // A flight given up for a newer one leaves the newer one in place.
            if state.flightNumber == number {
                state.flight = nil
                state.flightDeadline = nil
            }
            switch result {
            case .success(let fetched):
                let token = AccessToken(value: fetched.value, expiresAt: startedWall + fetched.lifetime)
                let margin = tuning.refreshMargin(lifetime: fetched.lifetime)
                state.cached = Cached(
                    token: token,
                    refreshAt: started + (fetched.lifetime - margin),
                    expiresAt: started + fetched.lifetime
                )
                logger.debug(
                    "access token fetched",
                    metadata: [
                        "credentials": "\(summary)", "access_token": "\(token.fingerprint)",
                        "expires_in_s": "\(Int(saturating: fetched.lifetime))",
                    ]
                )
                return .success(token)
            case .failure(let error):
                if error.fault == .transient, let cached = state.cached,
                    cached.expiresAt - clock.now >= tuning.usableFloor
                {
                    logger.debug(
                        "access token refresh failed; serving the cached one",
                        metadata: [
                            "credentials": "\(summary)", "access_token": "\(cached.token.fingerprint)",
                            "error": "\(error.message)",
                        ]
                    )
                    return .success(cached.token)
                }
                logger.debug("access token fetch failed", metadata: ["credentials": "\(summary)", "error": "\(error)"])
                return .failure(error)
            }
        }
    }

    public func invalidate(_ rejected: AccessToken) {
        state.withLock { state in
            if state.cached?.token.value == rejected.value { state.cached = nil }
        }
    }

    public func shutdown() async {
        let flight = state.withLock { state in
            state.cached = nil
            return state.flight
        }
        flight?.cancel()
        await exchange.shutdown()
    }
}
