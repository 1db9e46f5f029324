import AsyncHTTPClient
import Logging
import NIOCore
import Synchronization
import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Fetches tokens from an HTTP token provider: `GET` on a URL template where `{id}` is replaced by
/// the percent-encoded id, with optional extra headers (the agent's own credentials).
public final class HTTPTokenProvider: TokenProvider {
    /// The largest reply body read, in bytes; a larger one is a provider failure.
    public static let maxBodyBytes = 64 * 1024

    /// The URL template, with `{id}` where the id goes.
    public let urlTemplate: String
    private let headers: [(String, String)]
    private let reply: ProviderReply
    private let acceptance: TokenAcceptance
    private let timeout: TimeAmount
    private let client: HTTPClient
    private let clock: any AgentClock
    private let logger: Logger
    private let skew = Mutex(ClockSkew())

    /// The provider's clock as its replies showed it, and what was logged about it.
    private struct ClockSkew {
        var lastSkew: Double?
        var warnedDateSkew = false
        var warnedFutureIAT = false
    }

    /// The skew of the provider's `Date` header beyond which the agent warns, seconds.
    public static let dateSkewWarning: Double = 60

    /// Creates a provider. `headers` are sent with every request; they are never logged.
    public init(
        urlTemplate: String,
        headers: [(String, String)] = [],
        reply: ProviderReply = ProviderReply(),
        acceptance: TokenAcceptance = TokenAcceptance(),
        connectTimeout: Double = 2,
        timeout: Double = 10,
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger = Logger(label: "fleet-tokend.provider")
    ) {
        self.logger = logger
        self.urlTemplate = urlTemplate
        self.headers = headers
        self.reply = reply
        self.acceptance = acceptance
        self.timeout = .milliseconds(Int64(timeout * 1000))
        self.clock = clock
        self.client = .outbound(connectTimeout: connectTimeout, timeout: timeout)
    }

    public var summary: String { "http \(Self.redactedURL(urlTemplate))" }

    public var clockSkew: Double? { skew.withLock { $0.lastSkew } }

    /// The URL for `id`: the template with `{id}` replaced by the percent-encoded id.
    public static func url(template: String, id: String) -> String {
        template.replacing("{id}", with: PercentEncoding.encode(id))
    }

    /// The template without any user-info or query (which may carry secrets).
    public static func redactedURL(_ template: String) -> String {
        guard var components = URLComponents(string: template.replacing("{id}", with: "ID")) else {
            return "<url>"
        }
        components.user = nil
        components.password = nil
        if components.query != nil { components.percentEncodedQuery = "redacted" }
        return components.string ?? "<url>"
    }

    public func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        // `.` and `..` would walk the provider's URL, `*` ask for a wildcard: never sent.
        if let problem = TokenIdentifier.reservedProblem(key.id.utf8) {
            throw ProviderError.rejected("\(problem); not sent to the provider")
        }
        var request = HTTPClientRequest(url: Self.url(template: urlTemplate, id: key.id))
        request.method = .GET
        request.headers.add(name: "Accept", value: "application/json, text/plain")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response: OutboundReply
        do {
            response = try await client.exchange(request, timeout: timeout, maxBodyBytes: Self.maxBodyBytes)
        } catch {
            throw ProviderError.failed(error.text)
        }
        let now = clock.wallSeconds
        noteDate(response.headers.first(name: "date"), now: now)
        let status = response.status
        switch status {
        case 200..<300:
            break
        case 429, 503:
            if let wait = ProviderReply.retryAfter(response.headers.first(name: "retry-after"), now: now) {
                throw ProviderError.throttled("HTTP \(status)", retryAfter: wait)
            }
            throw ProviderError.failed("HTTP \(status)")
        case 300..<400:
            throw ProviderError.failed("HTTP \(status) redirect, not followed")
        case 408:
            throw ProviderError.failed("HTTP \(status)")
        case 400..<500:
            throw ProviderError.rejected("HTTP \(status)")
        default:
            throw ProviderError.failed("HTTP \(status)")
        }
        let (token, expiresAt) = try reply.read(
            body: response.body,
            contentType: response.headers.first(name: "content-type"),
            headerExpiry: ProviderReply.expiry(
                cacheControl: response.headers.first(name: "cache-control"),
                expires: response.headers.first(name: "expires"),
                now: now
            ),
            now: now
        )
        let fetched = try acceptance.accept(token: token, expiresAt: expiresAt, for: key, now: now)
        if let issuedAt = JWTClaims(token: fetched.token)?.issuedAt, issuedAt > now + 1 {
            noteFutureIssue(aheadBy: issuedAt - now)
        }
        return fetched
    }

    /// Records how far the provider's `Date` header is from our clock, warning once when it is
    /// more than ``dateSkewWarning`` off (and again after it came back and left again).
    private func noteDate(_ header: String?, now: Double) {
        guard let header, let date = ProviderReply.httpDate(header) else { return }
        let difference = date - now
        let warn = skew.withLock { state -> Bool in
            state.lastSkew = difference
            let far = abs(difference) > Self.dateSkewWarning
            defer { state.warnedDateSkew = far }
            return far && !state.warnedDateSkew
        }
        if warn {
            logger.warning(
                "provider clock differs from ours",
                metadata: [
                    "provider": "\(summary)", "provider_clock_skew_s": "\(Int(saturating: difference.rounded()))",
                ]
            )
        }
    }

    /// Logs once that the provider issues tokens dated in our future (its clock runs ahead); the
    /// tokens are still used.
    private func noteFutureIssue(aheadBy seconds: Double) {
        let first = skew.withLock { state in
            defer { state.warnedFutureIAT = true }
            return !state.warnedFutureIAT
        }
        if first {
            logger.warning(
                "provider issues tokens dated in the future; using them",
                metadata: ["provider": "\(summary)", "iat_ahead_s": "\(Int(saturating: seconds.rounded()))"]
            )
        }
    }

    public func shutdown() async {
        try? await client.shutdown()
    }

    deinit { client.shutDownInBackground() }

}
