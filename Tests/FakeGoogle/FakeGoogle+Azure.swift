import Foundation

extension FakeGoogle {
    static let azureTokenPath = "/metadata/identity/oauth2/token"
    /// The `api-version` of ``azureTokenURL(resource:)``.
    public static let azureAPIVersion = "2018-02-01"
    /// The Azure resource `--write-external-account`'s `url.json` asks for.
    public static let azureDefaultResource = "api://fleet-tokend-fake"

    /// The token URL of Azure's instance metadata for `resource`
    /// (`…/metadata/identity/oauth2/token?api-version=2018-02-01&resource=…`).
    public func azureTokenURL(resource: String) -> String {
        "http://\(urlHost):\(port)\(Self.azureTokenPath)?api-version=\(Self.azureAPIVersion)&resource="
            + FakeAWSSignature.uriEncode(resource)
    }

    /// Makes the Azure token path serve a new token for `resource`: an RS256 JWT of a fake Entra
    /// ID tenant with `aud` `resource`, valid for a day, which STS accepts as a subject token for
    /// `audience`. Returns the token.
    @discardableResult
    public func registerAzureResource(_ resource: String, audience: String = FakeGoogle.standardAudience) -> String {
        let token = makeJWT(
            audience: resource,
            subject: "fake-managed-identity",
            lifetime: 86400,
            issuer: "https://sts.windows.net/00000000-0000-0000-0000-000000000000/"
        )
        registerSubjectToken(token, audience: audience)
        state.withLock { $0.federation.azureResources[resource] = token }
        return token
    }

    /// Every request to the Azure token path, in order.
    public var azureTokenRequests: [AzureTokenRequest] { state.withLock { $0.federation.azureTokenRequests } }

    /// Azure's instance metadata token path: `GET` with `Metadata: true`, an `api-version` and a
    /// registered `resource`; errors as Azure's IMDS sends them (`{"error","error_description"}`).
    func azureToken(_ request: FakeRequest) -> FakeReply {
        let query = request.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).dropFirst().first
        let parameters = FakeJSON.form(Array((query ?? "").utf8))
        let header = request.headers.first(name: "Metadata")
        let reply: FakeReply
        if let fault = takeFault(.azureMetadata) {
            reply = self.reply(for: fault, api: .azureMetadata, account: "")
        } else {
            reply = azureTokenReply(request, parameters: parameters, metadataHeader: header)
        }
        state.withLock {
            $0.federation.azureTokenRequests.append(
                AzureTokenRequest(
                    resource: parameters["resource"],
                    apiVersion: parameters["api-version"],
                    metadataHeader: header,
                    status: reply.status,
                    receivedAt: Date()
                )
            )
        }
        return reply
    }

    private func azureTokenReply(
        _ request: FakeRequest,
        parameters: [String: String],
        metadataHeader: String?
    ) -> FakeReply {
        func refuse(_ error: String, _ description: String) -> FakeReply {
            .json(400, GoogleErrors.oauth(error, description))
        }
        guard request.method == .GET else { return .text(405, "Method Not Allowed") }
        guard metadataHeader?.lowercased() == "true" else {
            return refuse("bad_request", "Required metadata header not specified")
        }
        guard parameters["api-version"] != nil else {
            return refuse("bad_request", "Required query variable 'api-version' is missing")
        }
        guard let resource = parameters["resource"], !resource.isEmpty else {
            return refuse("invalid_request", "Required query variable 'resource' is missing")
        }
        guard let token = state.withLock({ $0.federation.azureResources[resource] }) else {
            return refuse(
                "invalid_resource",
                "AADSTS500011: The resource principal named \(resource) was not found in the tenant."
            )
        }
        let now = Int(Date().timeIntervalSince1970)
        return .json(
            200,
            FakeJSON.encode([
                "access_token": token, "client_id": "00000000-0000-0000-0000-00000000fa6e", "expires_in": "3599",
                "expires_on": "\(now + 3599)", "ext_expires_in": "3599", "not_before": "\(now)", "resource": resource,
                "token_type": "Bearer",
            ])
        )
    }
}
