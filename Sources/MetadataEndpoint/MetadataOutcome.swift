/// What an answer was, for the agent's counters: its status and, for a 200, whether it carried a
/// token, for a 403, which check refused it. A fixed set (no path, no uid): STATS shows each as
/// `metadata_<label>`, the metrics as `fleet_tokend_metadata_requests_total{code,outcome}`.
public enum MetadataOutcome: Int, CaseIterable, Sendable {
    /// 200 with an access token (`.../token`, `HEAD` included).
    case token
    /// Any other 200: a directory, an email, the scopes, the project, the universe.
    case ok
    /// 400: a target that is no path, `wait_for_change`.
    case badRequest
    /// 403: the `Host` field (or an absolute-form target's authority) does not name the endpoint.
    case refusedHost
    /// 403: an `X-Forwarded-For` or `Forwarded` field.
    case refusedForwarded
    /// 403: no `Metadata-Flavor: Google`.
    case refusedFlavor
    /// 403: the kernel did not name the connecting socket's owner.
    case refusedPeer
    /// 403: the entry's `allow` leaves the peer out.
    case refusedRules
    /// 403: `scopes=` outside the entry's.
    case refusedScopes
    /// 404.
    case notFound
    /// 405: a method other than `GET` and `HEAD`.
    case badMethod
    /// 503: no token now (the fetch at IAM failed), or the endpoint is starting.
    case unavailable

    /// The HTTP status of answers of this outcome.
    public var status: Int {
        switch self {
        case .token, .ok: 200
        case .badRequest: 400
        case .refusedHost, .refusedForwarded, .refusedFlavor, .refusedPeer, .refusedRules, .refusedScopes: 403
        case .notFound: 404
        case .badMethod: 405
        case .unavailable: 503
        }
    }

    /// Its name in STATS (after `metadata_`) and in the metrics' `outcome` label.
    public var label: String {
        switch self {
        case .token: "tokens"
        case .ok: "ok"
        case .badRequest: "bad_request"
        case .refusedHost: "refused_host"
        case .refusedForwarded: "refused_forwarded"
        case .refusedFlavor: "refused_flavor"
        case .refusedPeer: "refused_peer"
        case .refusedRules: "refused_rules"
        case .refusedScopes: "refused_scopes"
        case .notFound: "not_found"
        case .badMethod: "bad_method"
        case .unavailable: "unavailable"
        }
    }
}
