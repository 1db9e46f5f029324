import Foundation
import NIOHTTP1

/// A request as the handler collected it.
struct FakeRequest {
    var method: HTTPMethod
    var uri: String
    var headers: HTTPHeaders
    var body: [UInt8]

    var path: Substring { uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)[0] }
}

/// What the handler answers.
struct FakeReply {
    var status: Int
    var headers: [(String, String)] = []
    var body: [UInt8] = []
    var delayMicroseconds = 0
    var drop = false
    var hang = false
    /// Send the head, then the body one byte at a time this many milliseconds apart.
    var dripMilliseconds: Int?
    /// Held until ``FakeGoogle/releaseSignJwt()`` (after any delay).
    var held = false

    static func json(_ status: Int, _ body: [UInt8], headers: [(String, String)] = []) -> FakeReply {
        FakeReply(status: status, headers: [("Content-Type", "application/json; charset=UTF-8")] + headers, body: body)
    }

    static func text(_ status: Int, _ text: String, headers: [(String, String)] = []) -> FakeReply {
        FakeReply(
            status: status,
            headers: [("Content-Type", "text/plain; charset=utf-8")] + headers,
            body: Array(text.utf8)
        )
    }
}

extension FakeGoogle {
    static let metadataTokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"
    static let signJwtPrefix = "/v1/projects/-/serviceAccounts/"
    static let jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"

    /// The reply to `request`.
    func reply(to request: FakeRequest) -> FakeReply {
        let path = request.path
        if path == Self.metadataTokenPath { return metadata(request) }
        if path == "/token" { return token(request) }
        if path.hasPrefix(Self.signJwtPrefix), path.hasSuffix(":signJwt") {
            let encoded = path.dropFirst(Self.signJwtPrefix.count).dropLast(":signJwt".count)
            return signJwt(request, account: encoded.removingPercentEncoding ?? String(encoded))
        }
        if path.hasPrefix(Self.signJwtPrefix), path.hasSuffix(":generateAccessToken") {
            let encoded = path.dropFirst(Self.signJwtPrefix.count).dropLast(":generateAccessToken".count)
            return generateAccessToken(request, account: encoded.removingPercentEncoding ?? String(encoded))
        }
        if let reply = federationReply(to: request) { return reply }
        return .text(404, "Not Found")
    }

    /// The reply a fault makes, in `api`'s dialect (`generateAccessToken` speaks IAM's).
    func reply(for fault: FakeGoogleFault, api: FakeGoogleAPI, account: String) -> FakeReply {
        if api == .generateAccessToken, case .permissionDenied(let reason) = fault {
            let permission = "iam.serviceAccounts.getAccessToken"
            return .json(403, GoogleErrors.permissionDenied(reason, account: account, permission: permission))
        }
        let api = api == .generateAccessToken ? .iamCredentials : api
        switch (fault, api) {
        case (.dropConnection, _):
            return FakeReply(status: 0, drop: true)
        case (.hang, _):
            return FakeReply(status: 0, hang: true)
        case (.drip(let interval), _):
            var reply = FakeReply.json(200, Array(repeating: UInt8(ascii: " "), count: 4096))
            reply.dripMilliseconds = interval
            return reply
        case (.raw(let status, let body, let headers), _):
            return FakeReply(status: status, headers: headers.sorted { $0.key < $1.key }, body: body)
        case (.tooManyRequests(let seconds), _):
            let retry = seconds.map { [("Retry-After", "\($0)")] } ?? []
            switch api {
            case .iamCredentials: return .json(429, GoogleErrors.resourceExhausted(), headers: retry)
            case .oauthToken, .sts:
                return .json(429, GoogleErrors.oauth("rate_limit_exceeded", "Rate limit exceeded"), headers: retry)
            case .metadata, .awsMetadata: return .text(429, "Too Many Requests", headers: retry)
            case .generateAccessToken: return .json(429, GoogleErrors.resourceExhausted(), headers: retry)
            case .azureMetadata:
                return .json(
                    429,
                    GoogleErrors.oauth("too_many_requests", "Too many requests to the identity endpoint."),
                    headers: retry
                )
            }
        case (.unauthorized, .iamCredentials): return .json(401, GoogleErrors.unauthenticated(expired: true))
        case (.unauthorized, .oauthToken), (.unauthorized, .sts):
            return .json(401, GoogleErrors.oauth("invalid_client", "The OAuth client was not found."))
        case (.unauthorized, .azureMetadata):
            return .json(401, GoogleErrors.oauth("unauthorized_client", "The identity is not authorized."))
        case (.permissionDenied, .sts):
            return .json(
                403,
                GoogleErrors.oauth("access_denied", "The given credential is rejected by the attribute condition.")
            )
        case (.permissionDenied, .azureMetadata):
            return .json(403, GoogleErrors.oauth("access_denied", "The identity is not assigned to this VM."))
        case (.badRequest, .sts):
            return .json(400, GoogleErrors.oauth("invalid_grant", "The subject token is invalid."))
        case (.badRequest, .azureMetadata):
            return .json(400, GoogleErrors.oauth("bad_request", "Bad request."))
        case (.serverError(let status), .sts):
            return .json(status, GoogleErrors.oauth("server_error", "The service is currently unavailable."))
        case (.serverError(let status), .azureMetadata):
            return .json(status, GoogleErrors.oauth("unknown", "Failed to retrieve token from the identity endpoint."))
        case (.permissionDenied(let reason), .iamCredentials):
            return .json(403, GoogleErrors.permissionDenied(reason, account: account))
        case (.permissionDenied, .oauthToken):
            return .json(403, GoogleErrors.oauth("access_denied", "Access denied."))
        case (.notFound, .iamCredentials): return .json(404, GoogleErrors.notFound(account: account))
        case (.badRequest, .iamCredentials): return .json(400, GoogleErrors.invalidArgument("Invalid JWT payload."))
        case (.badRequest, .oauthToken):
            return .json(400, GoogleErrors.oauth("invalid_grant", "Invalid grant: account not found"))
        case (.serverError(let status), .iamCredentials): return .json(status, GoogleErrors.server(status))
        case (.serverError(let status), .oauthToken):
            return .json(status, GoogleErrors.oauth("internal_failure", "Backend Error"))
        case (.serverError(let status), .metadata), (.serverError(let status), .awsMetadata):
            return .text(status, "Service Unavailable")
        case (.unauthorized, .metadata), (.unauthorized, .awsMetadata): return .text(401, "Unauthorized")
        case (.permissionDenied, .metadata), (.permissionDenied, .awsMetadata): return .text(403, "Forbidden")
        case (.notFound, _): return .text(404, "Not Found")
        case (.badRequest, .metadata), (.badRequest, .awsMetadata): return .text(400, "Bad Request")
        case (_, .generateAccessToken): return .text(500, "unreachable: answered in IAM's dialect")
        }
    }

    private func metadata(_ request: FakeRequest) -> FakeReply {
        let flavor = request.headers.first(name: "Metadata-Flavor")
        var reply: FakeReply
        if let fault = takeFault(.metadata) {
            reply = self.reply(for: fault, api: .metadata, account: Self.instanceAccount)
        } else if request.method != .GET {
            reply = .text(405, "Method Not Allowed")
        } else if flavor != "Google" {
            reply = FakeReply(
                status: 403,
                headers: [("Content-Type", "text/html; charset=UTF-8")],
                body: Array("Missing required header \"Metadata-Flavor\": \"Google\"\n".utf8)
            )
        } else {
            let (value, lifetime) = issueAccessToken(by: .metadata, for: Self.instanceAccount)
            reply = .json(
                200,
                FakeJSON.encode(["access_token": value, "expires_in": lifetime, "token_type": "Bearer"]),
                headers: [("Metadata-Flavor", "Google")]
            )
        }
        let latency = state.withLock { state in
            state.metadataRequests.append(MetadataRequest(flavor: flavor, status: reply.status, receivedAt: Date()))
            return state.metadataLatencyMicroseconds
        }
        reply.delayMicroseconds = Int.random(in: latency)
        return reply
    }

    private func token(_ request: FakeRequest) -> FakeReply {
        let form = FakeJSON.form(request.body)
        let reply: FakeReply
        if let fault = takeFault(.oauthToken) {
            reply = self.reply(for: fault, api: .oauthToken, account: Self.keyFileAccount)
        } else if request.method != .POST {
            reply = .text(405, "Method Not Allowed")
        } else {
            reply = grant(form)
        }
        state.withLock {
            $0.tokenRequests.append(
                TokenEndpointRequest(grantType: form["grant_type"], status: reply.status, receivedAt: Date())
            )
        }
        return reply
    }

    private func grant(_ form: [String: String]) -> FakeReply {
        func invalidGrant(_ description: String) -> FakeReply {
            .json(400, GoogleErrors.oauth("invalid_grant", description))
        }
        let subject: String
        switch form["grant_type"] {
        case Self.jwtBearerGrant:
            guard let assertion = form["assertion"],
                let claims = FakeJWT.verify(assertion, key: keyFileKey.key.publicKey, keyID: keyFileKey.keyID)
            else { return invalidGrant("Invalid JWT Signature.") }
            let now = Date().timeIntervalSince1970
            let audiences = state.withLock { $0.tokenURIs }.union([tokenURI])
            guard claims["iss"] as? String == Self.keyFileAccount else { return invalidGrant("Invalid issuer.") }
            guard let audience = claims["aud"] as? String, audiences.contains(audience) else {
                return invalidGrant("Invalid JWT: Failed audience check.")
            }
            guard let scope = claims["scope"] as? String,
                scope.split(separator: " ").contains("\(Self.cloudPlatformScope)")
            else { return invalidGrant("Invalid OAuth scope or ID token audience provided.") }
            guard let iat = (claims["iat"] as? NSNumber)?.doubleValue,
                let exp = (claims["exp"] as? NSNumber)?.doubleValue,
                exp > now, iat <= now + 60, exp - iat <= 3600
            else {
                return invalidGrant(
                    "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. "
                        + "Check your iat and exp values in the JWT claim."
                )
            }
            subject = Self.keyFileAccount
        case "refresh_token":
            let revoked = state.withLock { $0.refreshTokenRevoked }
            guard form["client_id"] == Self.clientID, form["client_secret"] == clientSecret else {
                return invalidGrant("Unauthorized client or wrong client secret.")
            }
            guard form["refresh_token"] == refreshToken, !revoked else {
                return invalidGrant("Token has been expired or revoked.")
            }
            subject = Self.clientID
        default:
            return .json(
                400,
                GoogleErrors.oauth("unsupported_grant_type", "Invalid grant_type: \(form["grant_type"] ?? "")")
            )
        }
        let (value, lifetime) = issueAccessToken(by: .oauthToken, for: subject)
        return .json(200, FakeJSON.encode(["access_token": value, "expires_in": lifetime, "token_type": "Bearer"]))
    }

    private func signJwt(_ request: FakeRequest, account: String) -> FakeReply {
        let object = FakeJSON.object(request.body)
        let payload = object?["payload"] as? String
        let authorization = request.headers.first(name: "Authorization")
        let bearer = authorization.flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        var reply = signJwtReply(request, account: account, payload: payload, bearer: bearer)
        let latency: (Int, Bool) = state.withLock { state in
            state.signJwtCalls.append(
                SignJwtCall(
                    account: account,
                    payload: payload,
                    userProject: request.headers.first(name: "x-goog-user-project"),
                    accessToken: bearer,
                    receivedAt: Date(),
                    status: reply.status
                )
            )
            return (state.iamLatencyMilliseconds, state.iamHeld)
        }
        reply.delayMicroseconds = latency.0 * 1000
        reply.held = latency.1
        return reply
    }

    private func signJwtReply(_ request: FakeRequest, account: String, payload: String?, bearer: String?) -> FakeReply {
        if let fault = takeFault(.iamCredentials, account: account) {
            return reply(for: fault, api: .iamCredentials, account: account)
        }
        if request.method != .POST {
            return .json(405, GoogleErrors.iam(405, message: "Method Not Allowed", status: "UNIMPLEMENTED"))
        }
        let now = Date()
        let (issued, key) = state.withLock { state in
            (bearer.flatMap { state.accessTokens[$0] }, state.accounts[account])
        }
        guard let issued else { return .json(401, GoogleErrors.unauthenticated(expired: false)) }
        guard issued.expiresAt > now else { return .json(401, GoogleErrors.unauthenticated(expired: true)) }
        guard let key else { return .json(404, GoogleErrors.notFound(account: account)) }
        guard let payload else {
            return .json(400, GoogleErrors.invalidArgument("Invalid JSON payload received. Missing payload."))
        }
        guard var claims = FakeJSON.object(Array(payload.utf8)) else {
            return .json(400, GoogleErrors.invalidArgument("Invalid JWT payload."))
        }
        var bytes = Array(payload.utf8)
        if let exp = (claims["exp"] as? NSNumber)?.doubleValue {
            if exp > now.timeIntervalSince1970 + 12 * 3600 {
                return .json(
                    400,
                    GoogleErrors.invalidArgument("The expiration time must be no more than 12 hours in the future.")
                )
            }
        } else {
            // IAM adds an `exp` an hour ahead to a payload without one.
            claims["exp"] = Int(now.timeIntervalSince1970) + 3600
            bytes = FakeJSON.encode(claims)
        }
        guard let jwt = try? FakeJWT.sign(payload: bytes, key: key) else {
            return .json(500, GoogleErrors.server(500))
        }
        return .json(200, FakeJSON.encode(["keyId": key.keyID, "signedJwt": jwt]))
    }
}
