import Foundation

/// One `generateAccessToken` call the fake received, whatever it answered.
public struct GenerateAccessTokenCall: Sendable {
    /// The service account in the path (percent-decoded).
    public var account: String
    /// The body's `scope`, when it is an array of strings.
    public var scopes: [String]?
    /// The body's `lifetime` (`"3600s"`), if given.
    public var lifetime: String?
    /// The body's `delegates`, if given.
    public var delegates: [String]?
    /// The Bearer token of the `Authorization` header, if sent.
    public var accessToken: String?
    /// The access token issued (200 only).
    public var issued: String?
    /// When it arrived.
    public var receivedAt: Date
    /// The HTTP status answered (0 when the connection was dropped or left unanswered by a fault).
    public var status: Int
}

extension FakeGoogle {
    /// IAM Credentials `generateAccessToken`: a Bearer token the fake issued, an account it knows
    /// (each delegate too), a non-empty `scope` and a `lifetime` of at most 3600 s; the token is
    /// issued for the lifetime asked (at most ``capImpersonatedLifetime(seconds:)``) and expires
    /// as `expireTime` says (RFC 3339, whole seconds, `Z`).
    func generateAccessToken(_ request: FakeRequest, account: String) -> FakeReply {
        let object = FakeJSON.object(request.body)
        let bearer = request.headers.first(name: "Authorization").flatMap {
            $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil
        }
        var call = GenerateAccessTokenCall(
            account: account,
            scopes: object?["scope"] as? [String],
            lifetime: object?["lifetime"] as? String,
            delegates: object?["delegates"] as? [String],
            accessToken: bearer,
            receivedAt: Date(),
            status: 0
        )
        var reply = generateAccessTokenReply(request, call: &call)
        call.status = reply.status
        let latency: (Int, Bool) = state.withLock { state in
            state.generateAccessTokenCalls.append(call)
            return (state.iamLatencyMilliseconds, state.iamHeld)
        }
        reply.delayMicroseconds = latency.0 * 1000
        reply.held = latency.1
        return reply
    }

    private func generateAccessTokenReply(_ request: FakeRequest, call: inout GenerateAccessTokenCall) -> FakeReply {
        let account = call.account
        if let fault = takeFault(.generateAccessToken, account: account) {
            return reply(for: fault, api: .generateAccessToken, account: account)
        }
        if request.method != .POST {
            return .json(405, GoogleErrors.iam(405, message: "Method Not Allowed", status: "UNIMPLEMENTED"))
        }
        let (issued, known, cap) = state.withLock { state in
            (
                call.accessToken.flatMap { state.accessTokens[$0] }, Set(state.accounts.keys),
                state.impersonatedLifetimeCap
            )
        }
        guard let issued else { return .json(401, GoogleErrors.unauthenticated(expired: false)) }
        guard issued.expiresAt > Date() else { return .json(401, GoogleErrors.unauthenticated(expired: true)) }
        guard known.contains(account) else { return .json(404, GoogleErrors.notFound(account: account)) }
        let prefix = "projects/-/serviceAccounts/"
        for delegate in call.delegates ?? [] {
            guard delegate.hasPrefix(prefix), known.contains(String(delegate.dropFirst(prefix.count))) else {
                return .json(404, GoogleErrors.notFound(account: delegate))
            }
        }
        guard let scopes = call.scopes, !scopes.isEmpty else {
            return .json(400, GoogleErrors.invalidArgument("Scope required."))
        }
        var lifetime = 3600
        if let text = call.lifetime {
            guard text.hasSuffix("s"), let seconds = Int(text.dropLast()), (1...3600).contains(seconds) else {
                return .json(
                    400,
                    GoogleErrors.invalidArgument("The lifetime must be no more than 3600 seconds (1 hour).")
                )
            }
            lifetime = seconds
        }
        if let cap { lifetime = min(lifetime, cap) }
        let (value, _) = issueAccessToken(by: .generateAccessToken, for: account, lifetime: lifetime)
        call.issued = value
        let now = state.withLock { $0.expireTimeClock }?() ?? Date().timeIntervalSince1970
        let expiry = Date(timeIntervalSince1970: (now + Double(lifetime)).rounded(.down))
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return .json(200, FakeJSON.encode(["accessToken": value, "expireTime": formatter.string(from: expiry)]))
    }
}
