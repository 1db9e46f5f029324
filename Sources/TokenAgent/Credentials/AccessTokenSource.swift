/// Where a key-less issuer gets the OAuth 2.0 access token that authorizes its IAM Credentials
/// `signJwt` calls: the host's Application Default Credentials (a service-account key file, a
/// gcloud user's refresh token, or the metadata server).
///
/// An implementation caches its token, fetches a new one ahead of the cached one's expiry, makes
/// one fetch however many callers ask at once (singleflight), and never logs a token (only its
/// ``TokenFingerprint``).
public protocol AccessTokenSource: Sendable {
    /// Where the tokens come from, for logs and status; never a secret (e.g. `metadata server
    /// 169.254.169.254`, `service_account file for a@b.iam.gserviceaccount.com`).
    var summary: String { get }
    /// What the source is made of, for a reload to tell an unchanged source: the summary and,
    /// for a credentials file, a digest of its contents (a new refresh token or key under the same
    /// client or key id is another source); never a secret.
    var identity: String { get }
    /// The Google Cloud project to bill API calls to (`quota_project_id` of an `authorized_user`
    /// file), sent as `x-goog-user-project` with each call; `nil` when none.
    var quotaProject: String? { get }
    /// A valid access token: the cached one while it has more than a minute left, otherwise a
    /// new one (one fetch for every caller waiting).
    func accessToken() async throws(CredentialsError) -> AccessToken
    /// The API refused `rejected` (HTTP 401): it is forgotten if it is still the cached token, so
    /// the next ``accessToken()`` fetches another.
    func invalidate(_ rejected: AccessToken)
    /// Releases what the source holds (HTTP connections). Called once, at shutdown or when a reload
    /// retires it.
    func shutdown() async
    /// The counts of STS exchanges and impersonations, when the host's identity is federated
    /// (Workload Identity Federation); `nil` otherwise.
    var federationStatistics: FederationStatistics? { get }
}

extension AccessTokenSource {
    /// The summary, for a source with nothing more to tell it by.
    public var identity: String { summary }

    /// A source that is not federated has no federation counts.
    public var federationStatistics: FederationStatistics? { nil }
}

/// An OAuth 2.0 access token (a Bearer token) and when it expires.
public struct AccessToken: Sendable, Hashable, CustomStringConvertible {
    /// The token itself. Never log it: log ``fingerprint``.
    public var value: String
    /// When it expires, on the wall clock.
    public var expiresAt: UnixTime

    /// Creates an access token.
    public init(value: String, expiresAt: UnixTime) {
        self.value = value
        self.expiresAt = expiresAt
    }

    /// A short name for the token, safe to log.
    public var fingerprint: String { TokenFingerprint.of(value) }

    /// The fingerprint, never the token.
    public var description: String { "access token \(fingerprint)" }
}

/// Why no access token could be had.
public struct CredentialsError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Whose problem it is.
    public enum Fault: Sendable, Hashable {
        /// Passing: the endpoint could not be reached, timed out, or answered 5xx or 429. Retried
        /// with back-off.
        case transient
        /// The operator's: the credentials are refused (400/401/403 from the token endpoint, e.g.
        /// a revoked refresh token or a deleted key), or unusable. Nothing changes until they are
        /// fixed.
        case credentials
    }

    /// Whose problem it is.
    public var fault: Fault
    /// What happened, naming the endpoint and the HTTP status or OAuth `error`, with what to fix;
    /// never a secret.
    public var message: String
    /// For a 429 with `Retry-After`: seconds to wait.
    public var retryAfter: Double?

    /// Creates an error.
    public init(_ fault: Fault, _ message: String, retryAfter: Double? = nil) {
        self.fault = fault
        self.message = message
        self.retryAfter = retryAfter
    }

    public var description: String { message }
}
