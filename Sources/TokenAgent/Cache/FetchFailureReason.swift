/// Why a fetch failed, as a small closed set: the `reason` label of the fetch-error metric and of
/// `INFO`. Never carries an id, a token or a provider's text.
public enum FetchFailureReason: String, Sendable, Hashable, CaseIterable {
    /// The provider did not answer in time: connect or read time-out, the request's deadline, or
    /// HTTP 408.
    case timeout
    /// The provider could not be reached or dropped the connection: refused, reset, closed, no
    /// route.
    case refused
    /// The provider's host name does not resolve (`cannot resolve host tokens.internal: …`).
    case dns
    /// HTTP 5xx.
    case status5xx = "5xx"
    /// HTTP 429.
    case status429 = "429"
    /// HTTP 4xx other than 408 and 429: the provider refused the id.
    case status4xx = "4xx"
    /// A reply the agent cannot use: not JSON or plain text, no token or expiry, over 64 KiB, a
    /// redirect (not followed).
    case badBody = "bad_body"
    /// The token's `authorization` claim names another id.
    case claimMismatch = "claim_mismatch"
    /// The token is already expired, or has under the serving floor (10 s) left.
    case expired
    /// The host's federated identity could not get its subject token from the platform (a file,
    /// a URL, an executable, AWS): `subject token: …`.
    case subjectToken = "subject_token"
    /// Google's Security Token Service refused the host's federated exchange (e.g.
    /// `invalid_grant`): `STS refused the exchange …`.
    case sts
    /// The signer or the host's credentials need the operator: IAM refused the signature (403),
    /// has no such account (404) or our request (400), or the credentials were refused.
    case misconfigured
    /// Anything else (a local issuer that cannot sign).
    case other

    /// The reason of a provider error, from the texts the providers and the store give their
    /// failures (docs/PROTOCOL.md lists them).
    public init(_ error: ProviderError) {
        switch error {
        case .throttled(let text, _), .failed(let text), .rejected(let text):
            self = Self.classify(text)
        case .misconfigured(let text, _):
            self = Self.federation(text) ?? .misconfigured
        }
    }

    /// The federation reason a host-credentials failure text names, if any.
    static func federation(_ text: String) -> FetchFailureReason? {
        if text.contains(ExternalAccountExchange.subjectTokenMarker) { return .subjectToken }
        if text.contains(ExternalAccountExchange.refusedMarker) { return .sts }
        return nil
    }

    /// The reason of one failure text.
    static func classify(_ text: String) -> FetchFailureReason {
        if let federation = federation(text) { return federation }
        let lower = text.lowercased()
        if lower.hasPrefix("http ") {
            let code = Int(lower.dropFirst(5).prefix(3)) ?? 0
            switch code {
            case 408: return .timeout
            case 429: return .status429
            case 300..<400: return .badBody
            case 400..<500: return .status4xx
            case 500..<600: return .status5xx
            default: return .other
            }
        }
        if lower.contains("timeout") || lower.contains("timed out") || lower.contains("deadline") { return .timeout }
        if lower.contains("claim names another id") { return .claimMismatch }
        if lower.contains("expired") || lower.contains("expires in under") { return .expired }
        if lower.contains(OutboundFailure.cannotResolve) { return .dns }
        if lower.hasPrefix("request failed") { return .refused }
        if lower.contains("reply") || lower.contains("field ") || lower.contains("token is empty")
            || lower.contains("no expiry")
        {
            return .badBody
        }
        return .other
    }
}
