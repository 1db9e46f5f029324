import Foundation

extension FakeGoogle {
    /// The path of Google's Security Token Service's token exchange (`https://sts.googleapis.com/v1/token`).
    static let stsPath = "/v1/token"
    /// RFC 8693's grant type.
    public static let tokenExchangeGrant = "urn:ietf:params:oauth:grant-type:token-exchange"
    /// The token type STS issues (`requested_token_type`, `issued_token_type`).
    public static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"
    /// Subject token type: an OIDC JWT.
    public static let jwtTokenType = "urn:ietf:params:oauth:token-type:jwt"
    /// Subject token type: an OIDC ID token.
    public static let idTokenType = "urn:ietf:params:oauth:token-type:id_token"
    /// Subject token type: a SAML 2.0 assertion (base64).
    public static let saml2TokenType = "urn:ietf:params:oauth:token-type:saml2"
    /// Subject token type: a serialized, SigV4-signed AWS `GetCallerIdentity` request.
    public static let awsTokenType = "urn:ietf:params:aws:token-type:aws4_request"
    /// The IAM scope: google-auth asks STS for it (not for the file's scopes) when it impersonates.
    public static let iamScope = "https://www.googleapis.com/auth/iam"
    /// The scopes of which STS wants at least one: ``cloudPlatformScope`` or ``iamScope``.
    public static let stsScopes: Set<String> = [cloudPlatformScope, iamScope]
    /// A workload identity pool provider's audience STS knows from the start.
    public static let standardAudience =
        "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/fleet-pool/providers/fleet-provider"

    // MARK: Configuration

    /// The STS token exchange URL (for `token_url`).
    public var stsTokenURL: String { "http://\(urlHost):\(port)\(Self.stsPath)" }

    /// Makes STS accept `token` as a subject token (of type `jwt`, `id_token` or `saml2`) for
    /// `audience`, a workload identity pool provider it then knows. `subject` names the federated
    /// principal (`google.subject`); `nil`: the JWT's `sub` claim, or `fake-subject`. A JWT whose
    /// `exp` claim has passed is refused as expired.
    public func registerSubjectToken(_ token: String, audience: String, subject: String? = nil) {
        let claims = Self.unverifiedClaims(token)
        let subject = subject ?? (claims?["sub"] as? String) ?? "fake-subject"
        state.withLock { state in
            state.federation.subjectTokens[token, default: [:]][audience] = subject
            state.federation.audiences.insert(audience)
        }
    }

    /// A new OIDC ID token (an RS256 JWT, `iss` a fake issuer, `aud` `https:` + `audience`,
    /// expiring in `lifetime` seconds: negative for one already expired) that STS accepts for
    /// `audience` (``registerSubjectToken(_:audience:subject:)``).
    public func issueSubjectToken(
        audience: String = FakeGoogle.standardAudience,
        subject: String = "fleet-host",
        lifetime: Int = 3600
    ) -> String {
        let token = makeJWT(audience: "https:" + audience, subject: subject, lifetime: lifetime)
        registerSubjectToken(token, audience: audience, subject: subject)
        return token
    }

    /// Makes STS forget every subject token registered (AWS subject tokens are signatures, not
    /// registrations: ``rotateAWSCredentials()`` refuses the old ones).
    public func forgetSubjectTokens() { state.withLock { $0.federation.subjectTokens = [:] } }

    /// Makes STS know `audience` (a workload identity pool provider) without a subject token:
    /// for AWS subject tokens, whose signatures are their proof.
    public func registerAudience(_ audience: String) { state.withLock { _ = $0.federation.audiences.insert(audience) } }

    /// Registers an OAuth client of STS: from now on, a request with client authentication (HTTP
    /// Basic, or `client_id` and `client_secret` in the form) of another client or a wrong secret
    /// is refused with 401 `invalid_client`. Requests without client authentication are still
    /// served; with none registered, any client is accepted and recorded.
    public func registerSTSClient(id: String, secret: String) {
        state.withLock { $0.federation.stsClients[id] = secret }
    }

    /// STS's `expires_in` is a JSON string (`"3600"`, as some token services send it) instead of
    /// a number while this is on.
    public var stsExpiresInAsString: Bool {
        get { state.withLock { $0.federation.stsExpiresInAsString } }
        set { state.withLock { $0.federation.stsExpiresInAsString = newValue } }
    }

    /// Every request to STS, in order.
    public var stsRequests: [STSRequest] { state.withLock { $0.federation.stsRequests } }

    /// How many federated access tokens STS issued (requests answered 200).
    public var stsTokenCount: Int { state.withLock { $0.federation.stsRequests.count(where: { $0.status == 200 }) } }

    /// The federated principal of `subject` in `audience`'s pool:
    /// `principal://iam.googleapis.com/projects/N/locations/global/workloadIdentityPools/P/subject/S`.
    public static func principal(audience: String, subject: String) -> String {
        var pool = Substring(audience)
        if pool.hasPrefix("//iam.googleapis.com/") { pool = pool.dropFirst("//iam.googleapis.com/".count) }
        if let providers = pool.range(of: "/providers/") { pool = pool[..<providers.lowerBound] }
        return "principal://iam.googleapis.com/\(pool)/subject/\(subject)"
    }

    // MARK: The route

    /// STS's token exchange: RFC 8693 with Google's checks, in the order below, each refusal in
    /// OAuth's dialect (400 `{"error","error_description"}`; 401 `invalid_client`).
    func sts(_ request: FakeRequest) -> FakeReply {
        let form = FakeJSON.form(request.body)
        let basic = Self.basicCredentials(request.headers.first(name: "Authorization"))
        var record = STSRequest(
            grantType: form["grant_type"],
            audience: form["audience"],
            subjectTokenType: form["subject_token_type"],
            subjectToken: form["subject_token"],
            scope: form["scope"],
            requestedTokenType: form["requested_token_type"],
            options: form["options"],
            clientID: basic?.id ?? form["client_id"],
            apiClient: request.headers.first(name: "x-goog-api-client"),
            status: 0,
            receivedAt: Date()
        )
        let reply: FakeReply
        if let fault = takeFault(.sts) {
            reply = self.reply(for: fault, api: .sts, account: "")
        } else if request.method != .POST {
            reply = .text(405, "Method Not Allowed")
        } else {
            reply = exchange(
                form,
                client: basic ?? form["client_id"].map { ($0, form["client_secret"] ?? "") },
                record: &record
            )
        }
        record.status = reply.status
        if reply.status != 200, let body = FakeJSON.object(reply.body) {
            record.error = body["error"] as? String
            record.errorDescription = body["error_description"] as? String
        }
        state.withLock { $0.federation.stsRequests.append(record) }
        return reply
    }

    private func exchange(
        _ form: [String: String],
        client: (id: String, secret: String)?,
        record: inout STSRequest
    ) -> FakeReply {
        func refuse(_ error: String, _ description: String, status: Int = 400) -> FakeReply {
            .json(status, GoogleErrors.oauth(error, description))
        }
        let federation = state.withLock { $0.federation }
        if let client, !federation.stsClients.isEmpty {
            // RFC 6749 form-encodes the id and secret in Basic; google-auth does not: either will do.
            func decode(_ part: String) -> String {
                part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? part
            }
            guard
                federation.stsClients[client.id] == client.secret
                    || federation.stsClients[decode(client.id)] == decode(client.secret)
            else {
                return refuse("invalid_client", "The OAuth client was not found or its secret is wrong.", status: 401)
            }
        }
        guard form["grant_type"] == Self.tokenExchangeGrant else {
            return refuse("unsupported_grant_type", "Invalid value for \"grant_type\": \(form["grant_type"] ?? "").")
        }
        guard form["requested_token_type"] == Self.accessTokenType else {
            return refuse(
                "invalid_request",
                "Invalid value for \"requested_token_type\": \(form["requested_token_type"] ?? ""). "
                    + "Expected \(Self.accessTokenType)."
            )
        }
        guard let subjectTokenType = form["subject_token_type"], !subjectTokenType.isEmpty else {
            return refuse("invalid_request", "Missing required parameter: \"subject_token_type\".")
        }
        guard let subjectToken = form["subject_token"], !subjectToken.isEmpty else {
            return refuse("invalid_request", "Missing required parameter: \"subject_token\".")
        }
        guard let audience = form["audience"], !audience.isEmpty else {
            return refuse("invalid_request", "Missing required parameter: \"audience\".")
        }
        let scopes = Set((form["scope"] ?? "").split(separator: " ").map(String.init))
        guard !scopes.isDisjoint(with: Self.stsScopes) else {
            return refuse(
                "invalid_scope",
                "The scope must include \(Self.cloudPlatformScope) or \(Self.iamScope) "
                    + "(scope sent: \"\(form["scope"] ?? "")\")."
            )
        }
        let subject: String
        switch subjectTokenType {
        case Self.jwtTokenType, Self.idTokenType, Self.saml2TokenType:
            let tokenAudience = Self.unverifiedClaims(subjectToken)?["aud"] as? String ?? audience
            let mismatch = refuse(
                "invalid_grant",
                "The audience in ID Token [\(tokenAudience)] does not match the expected audience."
            )
            guard federation.audiences.contains(audience) else { return mismatch }
            guard let audiences = federation.subjectTokens[subjectToken] else {
                return refuse("invalid_grant", "Unable to verify the subject token: the fake STS does not know it.")
            }
            guard let known = audiences[audience] else { return mismatch }
            if subjectTokenType != Self.saml2TokenType,
                let exp = (Self.unverifiedClaims(subjectToken)?["exp"] as? NSNumber)?.doubleValue,
                exp <= Date().timeIntervalSince1970
            {
                return refuse("invalid_grant", "The ID Token has expired (exp \(Int(exp))).")
            }
            subject = known
        case Self.awsTokenType:
            guard federation.audiences.contains(audience) else {
                return refuse(
                    "invalid_grant",
                    "The audience [\(audience)] is not a workload identity pool provider the fake STS knows."
                )
            }
            let result = FakeAWSSignature.verify(subjectToken: subjectToken, audience: audience, now: Date()) { id in
                federation.awsKeys[id]
            }
            switch result {
            case .failure(let refusal):
                record.awsSignatureVerified = false
                if case .invalidRequest(let description) = refusal { return refuse("invalid_request", description) }
                return refuse("invalid_grant", refusal.description)
            case .success(let verified):
                record.awsSignatureVerified = true
                record.awsRegion = verified.region
                record.awsSignedHeaders = verified.signedHeaders
                record.awsAccessKeyID = verified.accessKeyID
                subject =
                    verified.accessKeyID == federation.awsInstanceCredentials.accessKeyID
                    ? "arn:aws:sts::000000000000:assumed-role/\(federation.awsRoleName)/i-0fake0instance"
                    : "arn:aws:iam::000000000000:user/fake-user"
            }
        default:
            return refuse("invalid_request", "Invalid value for \"subject_token_type\": \(subjectTokenType).")
        }
        let principal = Self.principal(audience: audience, subject: subject)
        let (value, lifetime) = issueAccessToken(by: .sts, for: principal)
        record.principal = principal
        record.issued = value
        let expiresIn: Any = federation.stsExpiresInAsString ? String(lifetime) : lifetime
        return .json(
            200,
            FakeJSON.encode([
                "access_token": value, "issued_token_type": Self.accessTokenType, "token_type": "Bearer",
                "expires_in": expiresIn,
            ])
        )
    }

    // MARK: Helpers

    /// The id and secret of an `Authorization: Basic base64(id:secret)` header as sent (RFC 6749
    /// §2.3.1 form-encodes each; google-auth sends them as they are), or `nil`.
    static func basicCredentials(_ header: String?) -> (id: String, secret: String)? {
        guard let header, header.lowercased().hasPrefix("basic "),
            let data = Data(base64Encoded: String(header.dropFirst(6)).trimmingCharacters(in: .whitespaces))
        else { return nil }
        let text = String(decoding: data, as: UTF8.self)
        guard let colon = text.firstIndex(of: ":") else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    /// The claims of a JWT-shaped `token` (not verified), or `nil`.
    static func unverifiedClaims(_ token: String) -> [String: Any]? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let payload = FakeJSON.base64URLDecode(parts[1]) else { return nil }
        return FakeJSON.object(payload)
    }

    /// An RS256 JWT of a fake identity provider, signed with the key file's key.
    func makeJWT(audience: String, subject: String, lifetime: Int, issuer: String = "https://oidc.fake-idp.test")
        -> String
    {
        let now = Int(Date().timeIntervalSince1970)
        let claims: [String: Any] = [
            "iss": issuer, "sub": subject, "aud": audience, "iat": min(now, now + lifetime), "exp": now + lifetime,
            "jti": FakeJSON.randomToken(12),
        ]
        return (try? FakeJWT.sign(payload: FakeJSON.encode(claims), key: keyFileKey))
            ?? "\(FakeJSON.base64URL(Array("{\"alg\":\"none\"}".utf8))).\(FakeJSON.base64URL(FakeJSON.encode(claims)))."
    }
}
