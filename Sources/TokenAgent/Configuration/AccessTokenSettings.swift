/// One entry of `access_tokens`: an OAuth 2.0 access token the agent holds and serves as
/// `access <name>` (docs/CONFIG.md, "Access tokens"): a service account's, by impersonation
/// through IAM Credentials `generateAccessToken`, or the host's own (`"source": "host"`).
public struct AccessTokenSettings: Sendable, Hashable {
    /// Where the token comes from.
    public enum Source: String, Sendable, Hashable, CaseIterable {
        /// A service account's token, by impersonation: IAM Credentials `generateAccessToken`,
        /// authorized by the host's credentials (the default).
        case impersonation
        /// The host's own token (its credentials file or the metadata server), as the key-less
        /// issuers use it: only with `allow_host_identity`.
        case host
    }

    /// Where the token comes from (`source`; default ``Source/impersonation``).
    public var source: Source?
    /// The service account impersonated (`service_account`).
    public var serviceAccount: String?
    /// The OAuth scopes asked for (`scopes`; default ``defaultScopes``).
    public var scopes: [String]?
    /// The lifetime asked for, seconds (`lifetime`; default ``maxLifetime``).
    public var lifetime: Double?
    /// The chain of service accounts the grant passes through (`delegates`), each holding Token
    /// Creator on the next, the last on ``serviceAccount``.
    public var delegates: [String]?
    /// The most `generateAccessToken` calls a minute (`calls_per_minute`; default
    /// ``defaultCallsPerMinute``).
    public var callsPerMinute: Double?
    /// Who may have the token (`allow`): required, there is no open entry.
    public var allow: PrincipalList?

    /// The scopes asked for when none are configured.
    public static let defaultScopes = ["https://www.googleapis.com/auth/cloud-platform"]
    /// The longest lifetime IAM grants without an organization policy, seconds, and the default.
    public static let maxLifetime: Double = 3600
    /// The shortest lifetime, seconds: three times the serving floor, so a token is served for
    /// most of its life.
    public static let minLifetime: Double = 900
    /// The default budget of `generateAccessToken` calls a minute: an entry needs one an hour,
    /// and `REFRESH` at most one per re-fetch guard (5 s).
    public static let defaultCallsPerMinute = 60
    /// The most scopes and the most delegates an entry may name.
    public static let maxScopes = 32
    /// The most delegates an entry may name.
    public static let maxDelegates = 10
    /// The longest scope, bytes.
    public static let maxScopeBytes = 256

    /// Settings for a token of `serviceAccount` by impersonation, allowed to `allow`.
    public init(serviceAccount: String, allow: PrincipalList) {
        self.serviceAccount = serviceAccount
        self.allow = allow
    }

    /// Settings for the host's own token, allowed to `allow`.
    public init(hostAllowedTo allow: PrincipalList) {
        source = .host
        self.allow = allow
    }

    /// The keys an entry accepts.
    public static let keys = [
        "source", "service_account", "scopes", "lifetime", "delegates", "calls_per_minute", "allow",
    ]

    /// Whether `scope` may be asked for: 1 to ``maxScopeBytes`` bytes of printable ASCII without
    /// spaces, quotes or backslashes (`https://www.googleapis.com/auth/cloud-platform`, `openid`).
    static func isScope(_ scope: String) -> Bool {
        let bytes = scope.utf8
        return !bytes.isEmpty && bytes.count <= maxScopeBytes
            && bytes.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
    }
}
