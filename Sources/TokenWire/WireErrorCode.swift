/// The error codes of protocol v1, as they appear after `ERR` on the wire.
public enum WireErrorCode: String, Sendable, CaseIterable, Hashable {
    /// Unknown verb, wrong fields, not UTF-8, or a line that is too long.
    case badRequest = "bad-request"
    /// The kind is not configured on this agent (or is not a valid kind name).
    case badKind = "bad-kind"
    /// The id breaks Fleet Engine's id rules.
    case badID = "bad-id"
    /// The caller may not have tokens of this kind.
    case denied
    /// No valid token, and the provider failed or timed out.
    case unavailable
    /// The provider refused this id.
    case rejected
    /// The agent is at a limit (connections, queued fetches).
    case busy
}

/// An error reply: a code and a one-line human-readable text.
public struct WireError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The machine-readable code.
    public var code: WireErrorCode
    /// The human-readable text. Encoding replaces line breaks and control characters with spaces.
    public var message: String

    /// Creates an error reply.
    public init(_ code: WireErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
