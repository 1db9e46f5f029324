import AsyncHTTPClient
import Synchronization
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The counts of a federated host identity's calls: STS exchanges and impersonations, their
/// failures by reason, and the back-offs STS's 429s and 5xxs started. Never a token.
public struct FederationStatistics: Sendable, Hashable {
    /// The reasons of a failed call.
    public enum Reason: String, Sendable, CaseIterable {
        /// The subject token could not be had (file, url, executable, AWS).
        case subjectToken = "subject_token"
        /// Refused: a 4xx other than 429 (e.g. STS's `invalid_grant`, IAM's 403).
        case refused
        /// 429.
        case throttled
        /// Not reached, timed out, or 5xx.
        case unavailable
        /// A 2xx reply the agent cannot use.
        case badReply = "bad_reply"
    }

    /// STS exchanges attempted.
    public var stsCalls = 0
    /// STS exchanges failed, by reason (a subject token that could not be had counts here).
    public var stsFailures: [Reason: Int] = [:]
    /// Back-offs entered after STS answered 429 or 5xx.
    public var stsBackoffs = 0
    /// Impersonations (`generateAccessToken`) attempted.
    public var impersonationCalls = 0
    /// Impersonations failed, by reason.
    public var impersonationFailures: [Reason: Int] = [:]

    /// No calls yet.
    public init() {}
}

/// One host identity through Workload Identity Federation: the subject token from the platform,
/// exchanged at STS (RFC 8693) for a federated access token, then, when the file names an
/// account, that token exchanged at IAM Credentials `generateAccessToken` for the account's.
///
/// The federated token is kept while it has a minute left, so a failed impersonation or the
/// next refresh asks STS again only when it must. After STS answers 429 or 5xx, it is not asked
/// again before its `Retry-After` or, without one, a back-off that doubles from 1 s to 60 s;
/// a call in that time fails at once (the caller serves its cached token while it can).
final class ExternalAccountExchange: Sendable {
    let account: ExternalAccountCredentials
    private let environment: [String: String]
    private let clock: any AgentClock
    private let state = Mutex(State())

    private struct State {
        var statistics = FederationStatistics()
        var federated: (token: String, expiresAt: Double)?
        var backoffUntil: Double?
        var backoffReason = ""
        var consecutiveFailures = 0
    }

    /// What starts the message of a subject token that could not be had (the `subject_token`
    /// reason of ``FetchFailureReason``).
    static let subjectTokenMarker = "subject token: "
    /// What the message of an exchange STS refused holds (the `sts` reason).
    static let refusedMarker = "STS refused the exchange"

    /// The scope asked of STS and of impersonation.
    static let scope = "https://www.googleapis.com/auth/cloud-platform"

    init(account: ExternalAccountCredentials, environment: [String: String], clock: any AgentClock) {
        self.account = account
        self.environment = environment
        self.clock = clock
    }

    /// The counts so far.
    var statistics: FederationStatistics { state.withLock { $0.statistics } }

    /// The longest one fetch may take, seconds, each call bounded by `timeout`: the source (an
    /// executable's own time-out, or up to four instance-metadata calls for AWS), STS and
    /// impersonation.
    func longestFetch(timeout: Double) -> Double {
        let source: Double =
            switch account.source {
            case .file: 0
            case .url: timeout
            case .executable(let executable): Double(executable.timeoutMilliseconds) / 1000
            case .aws: 4 * timeout
            }
        return source + 2 * timeout
    }

    /// One access token for the host.
    func fetch(http: FederationHTTP) async throws(CredentialsError) -> FetchedAccessToken {
        let federated = try await federatedToken(http: http)
        guard let impersonation = account.impersonation else { return federated }
        return try await impersonate(impersonation, with: federated.value, http: http)
    }

    // MARK: STS

    private func federatedToken(http: FederationHTTP) async throws(CredentialsError) -> FetchedAccessToken {
        let now = clock.monotonicSeconds
        let step = state.withLock { state -> Result<FetchedAccessToken?, CredentialsError> in
            if let kept = state.federated, kept.expiresAt - now > 60 {
                return .success(FetchedAccessToken(value: kept.token, lifetime: kept.expiresAt - now))
            }
            if let until = state.backoffUntil, now < until {
                return .failure(
                    CredentialsError(
                        .transient,
                        "STS \(account.tokenURL) backing off for \(Int((until - now).rounded(.up))) s after "
                            + state.backoffReason,
                        retryAfter: until - now
                    )
                )
            }
            return .success(nil)
        }
        if let kept = try step.get() { return kept }
        let subject: String
        do {
            subject = try await subjectToken(http: http)
        } catch {
            count(sts: .subjectToken)
            throw CredentialsError(error.fault, Self.subjectTokenMarker + error.message, retryAfter: error.retryAfter)
        }
        state.withLock { $0.statistics.stsCalls += 1 }
        var form = [
            ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
            ("audience", account.audience),
            ("scope", Self.scope),
            ("requested_token_type", "urn:ietf:params:oauth:token-type:access_token"),
            ("subject_token", subject),
            ("subject_token_type", account.subjectTokenType),
        ]
        var headers = [
            ("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"),
        ]
        if let client = account.client {
            if let secret = client.secret {
                let pair = Array("\(client.id):\(secret)".utf8)
                headers.append(("Authorization", "Basic " + Data(pair).base64EncodedString()))
            } else {
                form.append(("client_id", client.id))
            }
        }
        let body = form.map { PercentEncoding.encode($0) + "=" + PercentEncoding.encode($1) }
            .joined(separator: "&")
        let what = "STS \(account.tokenURL)"
        let reply: OutboundReply
        do {
            reply = try await http.send(
                .POST,
                account.tokenURL.url(),
                headers: headers,
                body: Array(body.utf8),
                what: what
            )
        } catch {
            backOff(after: "a failed call", retryAfter: nil, reason: .unavailable)
            throw error
        }
        switch reply.status {
        case 200..<300:
            let token: FetchedAccessToken
            do {
                token = try Self.readSTSReply(reply.body, what: what)
            } catch {
                count(sts: .badReply)
                throw error
            }
            state.withLock { state in
                state.consecutiveFailures = 0
                state.backoffUntil = nil
                state.federated = (token.value, clock.monotonicSeconds + token.lifetime)
            }
            return token
        case 429, 500...:
            let wait = ProviderReply.retryAfter(reply.headers.first(name: "retry-after"), now: clock.wallSeconds)
            backOff(
                after: "HTTP \(reply.status)",
                retryAfter: wait,
                reason: reply.status == 429 ? .throttled : .unavailable
            )
            throw CredentialsError(
                .transient,
                "\(what): HTTP \(reply.status)\(Self.errorField(reply.body, repeating: subject))",
                retryAfter: wait
            )
        default:
            count(sts: .refused)
            throw CredentialsError(
                .credentials,
                "\(Self.refusedMarker) at \(account.tokenURL): HTTP \(reply.status)"
                    + "\(Self.errorField(reply.body, repeating: subject)); check the audience \(EndpointSecurity.printable(account.audience)) "
                    + "and that the pool's provider accepts the subject token from \(account.source.kind)"
            )
        }
    }

    /// Reads STS's reply: `access_token`, `expires_in` (a number, or a string of one), and
    /// `token_type` Bearer when given.
    static func readSTSReply(_ body: [UInt8], what: String) throws(CredentialsError) -> FetchedAccessToken {
        try AccessTokenExchange.read(reply: body, endpoint: what, lifetimeAsText: true)
    }

    /// The length of a run of a secret's characters that an error may not repeat.
    static let echoWindow = 16

    /// The reply's OAuth or Google error (``AccessTokenExchange/errorField(_:)``), unless it repeats
    /// any ``echoWindow`` characters of `secret` (the subject token sent, the federated token): a
    /// server that echoes what it was sent must not put a token in the agent's messages.
    static func errorField(_ body: [UInt8], repeating secret: String) -> String {
        let field = AccessTokenExchange.errorField(body)
        let characters = Array(field)
        guard characters.count >= echoWindow else { return field }
        for start in 0...(characters.count - echoWindow)
        where secret.contains(String(characters[start..<(start + echoWindow)])) {
            return ", error text withheld: it repeats part of the token sent"
        }
        return field
    }

    private func count(sts reason: FederationStatistics.Reason) {
        state.withLock { $0.statistics.stsFailures[reason, default: 0] += 1 }
    }

    /// Starts a back-off after STS's 429, 5xx or a failed call.
    private func backOff(after what: String, retryAfter: Double?, reason: FederationStatistics.Reason) {
        let now = clock.monotonicSeconds
        state.withLock { state in
            state.statistics.stsFailures[reason, default: 0] += 1
            state.consecutiveFailures += 1
            let doubling = min(60, Double(1 << min(state.consecutiveFailures - 1, 6)))
            state.backoffUntil = now + min(300, retryAfter ?? doubling)
            state.backoffReason = what
            state.statistics.stsBackoffs += 1
        }
    }

    // MARK: The subject token

    private func subjectToken(http: FederationHTTP) async throws(CredentialsError) -> String {
        let token: String
        switch account.source {
        case .file(let path, let format):
            let bytes: [UInt8]
            do {
                bytes = try BoundedFile.read(path, limit: BoundedFile.keyLimit)
            } catch {
                let what =
                    switch error.problem {
                    case .unreadable(missing: true): "does not exist"
                    case .unreadable(missing: false): "cannot be read by the agent"
                    case .notRegular: "is not a regular file"
                    case .overLimit(let limit): "is over \(BoundedFile.describe(limit: limit))"
                    }
                throw CredentialsError(
                    .credentials,
                    "file \(path) \(what) (credential_source.file of \(account.path))"
                )
            }
            token = try Self.read(bytes, format: format, from: "file \(path)")
        case .url(let url, let headers, let format):
            let body = try await http.call(
                .GET,
                url.url(),
                headers: headers.map { ($0.name, $0.value) },
                what: "credential source url \(url)"
            )
            token = try Self.read(body, format: format, from: "credential source url \(url)")
        case .executable(let executable):
            let clock = clock
            token = try await executable.subjectToken(
                audience: account.audience,
                tokenType: account.subjectTokenType,
                impersonatedAccount: account.impersonation?.account,
                environment: environment,
                now: { clock.wallSeconds }
            )
        case .aws(let aws):
            token = try await aws.subjectToken(
                audience: account.audience,
                environment: environment,
                http: http,
                now: Int64(clock.wallSeconds)
            )
        }
        guard !token.isEmpty, token.utf8.count <= Self.maxSubjectTokenBytes else {
            throw CredentialsError(.credentials, "the \(account.source.kind) source gave an empty or oversized token")
        }
        return token
    }

    /// The largest subject token sent, bytes (a SAML assertion can be large).
    static let maxSubjectTokenBytes = 48 * 1024

    /// The subject token in `bytes`: the trimmed text, or a JSON object's field.
    static func read(_ bytes: [UInt8], format: SubjectTokenFormat, from what: String) throws(CredentialsError) -> String
    {
        switch format {
        case .text:
            let text = String(decoding: bytes, as: UTF8.self).trimmingWhitespaceAndNewlines()
            guard !text.isEmpty else { throw CredentialsError(.credentials, "\(what) is empty") }
            return text
        case .json(let field):
            guard let object = try? StrictJSON.object(bytes: bytes) else {
                throw CredentialsError(.credentials, "\(what) is not a JSON object (format json)")
            }
            guard case .string(let text)? = object[field], !text.isEmpty else {
                throw CredentialsError(
                    .credentials,
                    "\(what) has no string \(EndpointSecurity.printable(field)) (subject_token_field_name)"
                )
            }
            return text
        }
    }

    // MARK: Impersonation

    private func impersonate(
        _ impersonation: ExternalAccountCredentials.Impersonation,
        with federated: String,
        http: FederationHTTP
    ) async throws(CredentialsError) -> FetchedAccessToken {
        state.withLock { $0.statistics.impersonationCalls += 1 }
        let what = "impersonating \(impersonation.account)"
        let body = ImpersonatedAccessTokens.requestBody(scopes: [Self.scope], lifetime: impersonation.lifetime)
        let sentAt = clock.wallSeconds
        let reply: OutboundReply
        do {
            reply = try await http.send(
                .POST,
                impersonation.url.url(),
                headers: IAMCredentialsRequest.headers(bearer: federated),
                body: body,
                what: what
            )
        } catch {
            count(impersonation: .unavailable)
            throw error
        }
        let detail = Self.errorField(reply.body, repeating: federated)
        switch reply.status {
        case 200..<300:
            do {
                let token = try GenerateAccessTokenReply(
                    body: reply.body,
                    sentAt: sentAt,
                    lifetime: Double(impersonation.lifetime),
                    now: clock.wallSeconds
                )
                return FetchedAccessToken(value: token.token, lifetime: token.expiresAt - clock.wallSeconds)
            } catch {
                count(impersonation: .badReply)
                throw CredentialsError(.transient, "\(what): \(error)")
            }
        case 401:
            // The federated token was refused: ask STS afresh next time.
            state.withLock { $0.federated = nil }
            count(impersonation: .refused)
            throw CredentialsError(.transient, "\(what): HTTP 401\(detail); the federated token was refused")
        case 403:
            count(impersonation: .refused)
            throw CredentialsError(
                .credentials,
                "\(what): HTTP 403\(detail); grant the pool's principal roles/iam.workloadIdentityUser (or "
                    + "Service Account Token Creator, iam.serviceAccounts.getAccessToken) on \(impersonation.account)"
            )
        case 429, 500...:
            count(impersonation: reply.status == 429 ? .throttled : .unavailable)
            let wait = ProviderReply.retryAfter(reply.headers.first(name: "retry-after"), now: clock.wallSeconds)
            throw CredentialsError(.transient, "\(what): HTTP \(reply.status)\(detail)", retryAfter: wait)
        default:
            count(impersonation: .refused)
            throw CredentialsError(
                .credentials,
                "\(what): HTTP \(reply.status)\(detail); check service_account_impersonation_url in \(account.path)"
            )
        }
    }

    private func count(impersonation reason: FederationStatistics.Reason) {
        state.withLock { $0.statistics.impersonationFailures[reason, default: 0] += 1 }
    }
}
