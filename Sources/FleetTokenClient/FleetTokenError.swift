import TokenWire

/// Why a call failed. Agent errors carry the agent's text.
public enum FleetTokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The caller may not have tokens of this kind (`ERR denied`).
    case denied(String)
    /// No valid token, and the provider failed or timed out (`ERR unavailable`).
    case unavailable(String)
    /// The provider refused this id (`ERR rejected`).
    case rejected(String)
    /// The request was malformed, or the kind or id is invalid (`ERR bad-request`, `bad-kind`,
    /// `bad-id`); the text starts with the code.
    case badRequest(String)
    /// The agent is at a limit (`ERR busy`).
    case busy(String)
    /// No agent answered on the socket within the reconnect deadline.
    case agentUnreachable(String)
    /// The agent did not answer within the call's time-out.
    case timedOut(String)
    /// What answered on the socket broke the protocol: a reply line over
    /// `WireLimits.maxReplyLineBytes`, an unreadable line, a token that is not 1 to 16 KiB of
    /// printable ASCII, an expiry that is not within a day of now to 30 days ahead. Nothing of the
    /// reply is used, and the call is not retried. The text never holds a token.
    case invalidReply(String)

    /// The error for an `ERR` reply.
    init(_ error: WireError) {
        switch error.code {
        case .denied: self = .denied(error.message)
        case .unavailable: self = .unavailable(error.message)
        case .rejected: self = .rejected(error.message)
        case .busy: self = .busy(error.message)
        case .badRequest, .badKind, .badID: self = .badRequest("\(error.code.rawValue): \(error.message)")
        }
    }

    /// The text: the agent's, or the client's own.
    public var message: String {
        switch self {
        case .denied(let text), .unavailable(let text), .rejected(let text), .badRequest(let text), .busy(let text),
            .agentUnreachable(let text), .timedOut(let text), .invalidReply(let text):
            return text
        }
    }

    public var description: String {
        switch self {
        case .denied: return "denied: \(message)"
        case .unavailable: return "unavailable: \(message)"
        case .rejected: return "rejected: \(message)"
        case .badRequest: return "bad request: \(message)"
        case .busy: return "busy: \(message)"
        case .agentUnreachable: return "agent unreachable: \(message)"
        case .timedOut: return "timed out: \(message)"
        case .invalidReply: return "invalid reply: \(message)"
        }
    }
}
