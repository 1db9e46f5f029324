import Logging
import TokenWire

/// An access-token entry by impersonation (`access_tokens.<name>` with a `service_account`): the
/// service account's OAuth 2.0 access token, from IAM Credentials `generateAccessToken`
/// (`POST {endpoint}/v1/projects/-/serviceAccounts/{account}:generateAccessToken`, body
/// `{"scope": [...], "lifetime": "<n>s", "delegates": [...]}`, reply `{"accessToken",
/// "expireTime"}`), authorized by the host's credentials.
///
/// The entry is a kind of its own (``AccessTokenKind``) whose one id is its name. Faults are
/// handled as ``IAMCredentialsCall`` handles them (the operator's named with the fix: Token
/// Creator on the account, the API enabled), each call draws on the entry's own budget
/// (``signatureBudget``, `calls_per_minute`: IAM counts "generate credentials" apart from
/// signing), the reply is read strictly (``GenerateAccessTokenReply``), and the token is never
/// served with under ``AccessTokenKind/servingFloor`` left and never written to disk.
public final class ImpersonatedAccessTokens: TokenProvider {
    /// The entry's name.
    public let name: String
    /// The service account impersonated.
    public let account: String
    /// The scopes asked for.
    public let scopes: [String]
    /// The lifetime asked for, seconds.
    public let lifetime: Double
    /// The delegation chain, if any.
    public let delegates: [String]
    /// The budget of `generateAccessToken` calls a minute (`calls_per_minute`).
    public let signatureBudget: SignatureBudget?

    private let call: IAMCredentialsCall
    private let clock: any AgentClock

    /// An entry `name` impersonating `account` through the IAM Credentials API at `endpoint`.
    public init(
        name: String,
        account: String,
        scopes: [String] = AccessTokenSettings.defaultScopes,
        lifetime: Double = AccessTokenSettings.maxLifetime,
        delegates: [String] = [],
        endpoint: ServiceEndpoint = .iamCredentials,
        credentials: any AccessTokenSource,
        budget: SignatureBudget? = nil,
        faultHold: Double = 30,
        connectTimeout: Double = 2,
        timeout: Double = 10,
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger = Logger(label: "fleet-tokend.access-tokens")
    ) {
        self.name = name
        self.account = account
        self.scopes = scopes
        self.lifetime = lifetime
        self.delegates = delegates
        signatureBudget = budget
        self.clock = clock
        call = IAMCredentialsCall(
            method: .generateAccessToken,
            account: account,
            endpoint: endpoint,
            credentials: credentials,
            faultHold: faultHold,
            connectTimeout: connectTimeout,
            timeout: timeout,
            clock: clock,
            logger: logger
        )
    }

    public var summary: String { "access token of \(account) (IAM generateAccessToken)" }
    public var servingFloor: Double? { AccessTokenKind.servingFloor }
    public var tokensStayInMemory: Bool { true }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        guard AccessTokenKind.name(ofKind: key.kind) == Substring(name), key.id == name else {
            throw ProviderError.rejected("access token \(name) is not \(key.kind) \(key.id)")
        }
        let sentAt = clock.wallSeconds
        let reply = try await call.post(requestBody) { body in
            try GenerateAccessTokenReply(body: body, sentAt: sentAt, lifetime: lifetime, now: clock.wallSeconds)
        }
        return FetchedToken(token: reply.token, expiresAt: UnixTime(seconds: reply.expiresAt))
    }

    /// This entry's request (``requestBody(scopes:lifetime:delegates:)``).
    var requestBody: [UInt8] { Self.requestBody(scopes: scopes, lifetime: Int(lifetime), delegates: delegates) }

    /// A `generateAccessToken` request, as this entry and a federated host identity's
    /// impersonation (``ExternalAccountExchange``) send it:
    /// `{"scope":[...],"lifetime":"3600s","delegates":["projects/-/serviceAccounts/..."]}`, without
    /// `delegates` when there are none. Every string is checked printable ASCII without quotes or
    /// backslashes (an email, a scope), so it is written as it is.
    static func requestBody(scopes: [String], lifetime: Int, delegates: [String] = []) -> [UInt8] {
        func list(_ items: [String]) -> String { "[" + items.map { "\"\($0)\"" }.joined(separator: ",") + "]" }
        var json = "{\"scope\":\(list(scopes)),\"lifetime\":\"\(lifetime)s\""
        if !delegates.isEmpty { json += ",\"delegates\":\(list(delegates.map { "projects/-/serviceAccounts/\($0)" }))" }
        return Array((json + "}").utf8)
    }

    public func shutdown() async {
        await call.shutdown()
    }
}
