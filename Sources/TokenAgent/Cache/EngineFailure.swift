import TokenWire

/// Why the engine could not answer a request with a token. The server maps each case to a wire
/// error code and text (`ERR <code> <text>`); the engine knows nothing of the wire.
public enum EngineFailure: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind is not configured; `configured` lists the kinds that are, sorted.
    case unknownKind(String, configured: [String])
    /// Too many fetches of the kind already wait for a place at its provider.
    case busy(kind: String)
    /// Too many first fetches started by this uid already wait for a place.
    case busyForUID(UInt32)
    /// The kind's signature budget (``SignatureBudget``) had no permit for the fetch within
    /// ``FetchLimits/budgetWait``: nothing was signed, nothing is backed off; a permit is likely
    /// free in `retryAfter` seconds.
    case overBudget(kind: String, retryAfter: Int)
    /// The provider refused this id (remembered for the policy's rejection memory).
    case rejected(String)
    /// The provider is failing and its back-off is in force: the next try is in `seconds`.
    case backingOff(seconds: Int)
    /// The fetch failed (network, time-out, 5xx, an unusable reply, a token too close to expiry).
    case fetchFailed(String)
    /// The provider asked to be left alone (429/503 with `Retry-After`) for `retryAfter` seconds.
    case throttled(String, retryAfter: Int)
    /// A REFRESH naming a refused token got that same token back from the provider.
    case refusedTokenReissued
    /// The kind's provider was replaced by reloads faster than the request could be answered.
    case providerChanged
    /// A REFRESH reported the cached token refused, but its replacement was fetched (and failed,
    /// or was refused too) less than the re-fetch guard ago: the next try in `seconds`.
    case reportedRecently(seconds: Int)
    /// The kind's signer or credentials need the operator (a permission, an account, a refused
    /// credential): nothing is tried again for `retryAfter` seconds. Never a refusal of the id.
    case misconfigured(String, retryAfter: Int)

    /// The failure a provider error becomes.
    init(_ error: ProviderError) {
        switch error {
        case .failed(let text): self = .fetchFailed(text)
        case .rejected(let text): self = .rejected(text)
        case .throttled(let text, let retryAfter): self = .throttled(text, retryAfter: Int(saturating: retryAfter))
        case .misconfigured(let text, let retryAfter):
            self = .misconfigured(text, retryAfter: Int(saturating: retryAfter.rounded(.up)))
        }
    }

    public var description: String {
        switch self {
        case .unknownKind(let kind, let configured):
            // Access tokens are named as requests name them: `access <name>`.
            let names = configured.compactMap { AccessTokenKind.name(ofKind: $0) }
            if let name = AccessTokenKind.name(ofKind: kind) {
                return "access token \(name) is not configured; configured: "
                    + (names.isEmpty ? "none" : names.joined(separator: ","))
            }
            var kinds = configured.filter { !AccessTokenKind.isAccessKind($0) }
            if !names.isEmpty { kinds = (kinds + [AccessTokenKind.wireKind]).sorted() }
            return "kind \(kind) is not configured; configured: \(kinds.joined(separator: ","))"
        case .busy(let kind): return "too many fetches queued for kind \(kind)"
        case .busyForUID(let uid): return "too many fetches queued for uid \(uid)"
        case .overBudget(let kind, let retryAfter):
            return "signature budget of kind \(kind) spent; retry after \(retryAfter) s"
        case .rejected(let text): return text
        case .backingOff(let seconds): return "provider failing; next try in \(seconds) s"
        case .fetchFailed(let text): return text
        case .throttled(let text, let retryAfter): return "\(text); retry after \(retryAfter) s"
        case .refusedTokenReissued: return "the provider handed out the refused token again"
        case .providerChanged: return "the provider changed while fetching; try again"
        case .reportedRecently(let seconds):
            return "a replacement for the refused token was fetched moments ago; next try in \(seconds) s"
        case .misconfigured(let text, let retryAfter): return "\(text); retry after \(retryAfter) s"
        }
    }
}
