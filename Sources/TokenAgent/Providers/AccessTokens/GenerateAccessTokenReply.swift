import TokenWire

/// A `generateAccessToken` reply (`{"accessToken": ..., "expireTime": ...}`), checked whole before
/// its token is kept: anything else is IAM's fault (``ProviderError/failed(_:)``, named), never
/// cached or served.
///
/// - The reply is a strict-JSON object (``IAMCredentialsReply``: no name twice at any depth) with
///   an `accessToken` and an `expireTime`, both strings (other members are Google's to add and are
///   ignored).
/// - The token is opaque: 1 to ``AccessTokenKind/maxTokenBytes`` bytes of printable ASCII
///   without spaces (0x21 to 0x7E), what the protocol can carry.
/// - `expireTime` is an RFC 3339 date-time (``Timestamps/rfc3339(_:)``), after the moment the
///   reply is read and no later than the lifetime asked for after the moment the request was
///   sent, give or take ``clockTolerance`` for the two clocks.
struct GenerateAccessTokenReply: Sendable, Hashable {
    /// How far IAM's clock may be ahead of the agent's, seconds: an `expireTime` that far past
    /// the lifetime asked for is still taken (and kept as IAM stated it).
    static let clockTolerance: Double = 60

    /// The access token.
    var token: String
    /// When it expires, Unix seconds.
    var expiresAt: Double

    /// Reads `body`, the reply to a request sent at `sentAt` (Unix seconds) asking for `lifetime`
    /// seconds, read at `now`; throws ``ProviderError/failed(_:)`` naming what is wrong.
    init(body: [UInt8], sentAt: Double, lifetime: Double, now: Double) throws(ProviderError) {
        let reply = try IAMCredentialsReply(body: body, method: .generateAccessToken)
        let token = try reply.string("accessToken")
        let expireTime = try reply.string("expireTime")
        guard !token.isEmpty, token.utf8.count <= AccessTokenKind.maxTokenBytes,
            token.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw Self.fault(
                "reply's accessToken is empty, over \(AccessTokenKind.maxTokenBytes) bytes, or not printable ASCII"
            )
        }
        guard let expiresAt = Timestamps.rfc3339(expireTime), expiresAt.isFinite else {
            throw Self.fault("reply's expireTime is not an RFC 3339 date-time")
        }
        guard expiresAt > now else { throw Self.fault("reply's expireTime is not in the future") }
        guard expiresAt <= sentAt + lifetime + Self.clockTolerance else {
            throw Self.fault(
                "reply's expireTime is \(Int(saturating: (expiresAt - sentAt).rounded())) s away, "
                    + "past the \(Int(saturating: lifetime)) s asked for"
            )
        }
        self.token = token
        self.expiresAt = expiresAt
    }

    private static func fault(_ text: String) -> ProviderError {
        IAMCredentialsCall.Method.generateAccessToken.fault(text)
    }
}
