import TokenAgent
import TokenWire

extension EngineFailure {
    /// The wire error a failure is answered with.
    public var wireError: WireError {
        switch self {
        case .unknownKind: return WireError(.badKind, description)
        case .busy, .busyForUID, .overBudget: return WireError(.busy, description)
        case .rejected: return WireError(.rejected, description)
        case .backingOff, .fetchFailed, .throttled, .refusedTokenReissued, .providerChanged, .reportedRecently,
            .misconfigured:
            return WireError(.unavailable, description)
        }
    }
}
