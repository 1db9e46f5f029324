import TokenWire

/// An access-token entry of the host's own identity (`"source": "host"`, only with
/// `allow_host_identity`): the access token of the host's credentials (its credentials file or the
/// metadata server), the one key-less issuers authorize their IAM calls with. No IAM call is made,
/// so it draws on no budget.
///
/// The source refreshes its token ahead of expiry on its own schedule; a token it hands over with
/// less than ``AccessTokenKind/servingFloor`` and a minute left is dropped from it once and asked
/// for again (a metadata server may hand the same one back: then the fetch fails as too short).
public final class HostAccessTokens: TokenProvider {
    /// The entry's name.
    public let name: String
    private let credentials: any AccessTokenSource
    private let clock: any AgentClock

    /// An entry `name` serving the token of `credentials`.
    public init(name: String, credentials: any AccessTokenSource, clock: any AgentClock = SystemAgentClock()) {
        self.name = name
        self.credentials = credentials
        self.clock = clock
    }

    public var summary: String { "the host's own access token (\(credentials.summary))" }
    public var servingFloor: Double? { AccessTokenKind.servingFloor }
    public var tokensStayInMemory: Bool { true }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        guard AccessTokenKind.name(ofKind: key.kind) == Substring(name), key.id == name else {
            throw ProviderError.rejected("access token \(name) is not \(key.kind) \(key.id)")
        }
        var token = try await accessToken()
        if token.expiresAt.seconds - clock.wallSeconds < AccessTokenKind.servingFloor + 60 {
            credentials.invalidate(token)
            token = try await accessToken()
        }
        guard !token.value.isEmpty, token.value.utf8.count <= AccessTokenKind.maxTokenBytes,
            token.value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F })
        else {
            throw ProviderError.failed(
                "host credentials: the access token is empty, over \(AccessTokenKind.maxTokenBytes) bytes, "
                    + "or not printable ASCII"
            )
        }
        return FetchedToken(token: token.value, expiresAt: token.expiresAt)
    }

    private func accessToken() async throws(ProviderError) -> AccessToken {
        do {
            return try await credentials.accessToken()
        } catch {
            switch error.fault {
            case .transient:
                if let wait = error.retryAfter {
                    throw .throttled("host credentials: \(error.message)", retryAfter: wait)
                }
                throw .failed("host credentials: \(error.message)")
            case .credentials:
                throw .misconfigured("host credentials refused: \(error.message)", retryAfter: 30)
            }
        }
    }
}
