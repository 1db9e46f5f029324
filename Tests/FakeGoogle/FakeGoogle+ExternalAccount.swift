import Foundation

/// `external_account` credential configuration files, as `gcloud iam workload-identity-pools
/// create-cred-config` writes them, pointed at the fake, and the routes of Workload Identity
/// Federation besides STS.
extension FakeGoogle {
    /// The reply of a Workload Identity Federation route (STS, AWS and Azure metadata, Cloud
    /// Resource Manager), or `nil` for a path of none of them.
    func federationReply(to request: FakeRequest) -> FakeReply? {
        let path = request.path
        if path == Self.stsPath { return sts(request) }
        if path.hasPrefix(Self.awsMetadataPrefix) { return awsMetadata(request) }
        if path == Self.azureTokenPath { return azureToken(request) }
        let projects = "/v1/projects/"
        if path.hasPrefix(projects), !path.dropFirst(projects.count).isEmpty,
            !path.dropFirst(projects.count).contains(where: { $0 == "/" || $0 == ":" })
        {
            return project(request, id: String(path.dropFirst(projects.count)))
        }
        return nil
    }

    // MARK: Files

    /// The `generateAccessToken` URL of `account` (`service_account_impersonation_url`).
    public func generateAccessTokenURL(account: String) -> String {
        "\(iamEndpoint)/v1/projects/-/serviceAccounts/\(account):generateAccessToken"
    }

    /// An `external_account` file: `type`, `audience`, `subject_token_type`, `token_url`
    /// (``stsTokenURL``), `credential_source`, and when given `service_account_impersonation_url`
    /// (``generateAccessTokenURL(account:)`` of `account`), `service_account_impersonation`
    /// (`token_lifetime_seconds`), `client_id` and `client_secret`; `universe_domain`
    /// `googleapis.com`. STS knows `audience` only once told (``registerSubjectToken(_:audience:subject:)``,
    /// ``registerAudience(_:)``; the standard one from the start).
    public func externalAccountJSON(
        audience: String = FakeGoogle.standardAudience,
        subjectTokenType: String,
        credentialSource: [String: Any],
        impersonate account: String?,
        tokenLifetime: Int? = nil,
        clientID: String? = nil,
        clientSecret: String? = nil
    ) -> Data {
        var object: [String: Any] = [
            "type": "external_account", "audience": audience, "subject_token_type": subjectTokenType,
            "token_url": stsTokenURL, "credential_source": credentialSource, "universe_domain": "googleapis.com",
        ]
        if let account { object["service_account_impersonation_url"] = generateAccessTokenURL(account: account) }
        if let tokenLifetime { object["service_account_impersonation"] = ["token_lifetime_seconds": tokenLifetime] }
        if let clientID { object["client_id"] = clientID }
        if let clientSecret { object["client_secret"] = clientSecret }
        return Data(FakeJSON.encode(object))
    }

    /// A file credential source: `{"file": path, "format": {"type": "text"}}`, or with
    /// `jsonField` `{"type": "json", "subject_token_field_name": jsonField}`.
    public static func fileCredentialSource(path: String, jsonField: String? = nil) -> [String: Any] {
        ["file": path, "format": format(jsonField: jsonField)]
    }

    /// A URL credential source: `{"url", "headers", "format"}` (format as in
    /// ``fileCredentialSource(path:jsonField:)``; no `headers` when empty).
    public static func urlCredentialSource(
        url: String,
        headers: [String: String] = [:],
        jsonField: String? = nil
    ) -> [String: Any] {
        var source: [String: Any] = ["url": url, "format": format(jsonField: jsonField)]
        if !headers.isEmpty { source["headers"] = headers }
        return source
    }

    /// The URL credential source of an Azure VM for `resource`: ``azureTokenURL(resource:)`` with
    /// `Metadata: true`, the token in the JSON's `access_token` (as `create-cred-config --azure` writes it).
    public func azureCredentialSource(resource: String = FakeGoogle.azureDefaultResource) -> [String: Any] {
        Self.urlCredentialSource(
            url: azureTokenURL(resource: resource),
            headers: ["Metadata": "true"],
            jsonField: "access_token"
        )
    }

    /// The `aws1` credential source of the fake's AWS metadata: `region_url`, `url`,
    /// `regional_cred_verification_url` (AWS's real `sts.{region}.amazonaws.com`: only signed,
    /// never called), and with `imdsv2` `imdsv2_session_token_url`.
    public func awsCredentialSource(imdsv2: Bool = true) -> [String: Any] {
        var source: [String: Any] = [
            "environment_id": "aws1", "region_url": awsRegionURL, "url": awsMetadataURL,
            "regional_cred_verification_url":
                "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15",
        ]
        if imdsv2 { source["imdsv2_session_token_url"] = awsSessionTokenURL }
        return source
    }

    /// An executable (pluggable auth) credential source:
    /// `{"executable": {"command", "timeout_millis", "output_file"}}`.
    public static func executableCredentialSource(
        command: String,
        timeoutMillis: Int = 5000,
        outputFile: String? = nil
    ) -> [String: Any] {
        var executable: [String: Any] = ["command": command, "timeout_millis": timeoutMillis]
        if let outputFile { executable["output_file"] = outputFile }
        return ["executable": executable]
    }

    /// What a pluggable-auth executable prints for an OIDC `token`: `{"version": 1, "success":
    /// true, "token_type", "id_token", "expiration_time"}` (`expiration_time` left out when `nil`).
    public static func executableResponse(
        token: String,
        tokenType: String = FakeGoogle.idTokenType,
        expiresAt: Date?
    ) -> Data {
        var object: [String: Any] = ["version": 1, "success": true, "token_type": tokenType]
        object[tokenType == saml2TokenType ? "saml_response" : "id_token"] = token
        if let expiresAt { object["expiration_time"] = Int(expiresAt.timeIntervalSince1970) }
        return Data(FakeJSON.encode(object))
    }

    private static func format(jsonField: String?) -> [String: Any] {
        guard let jsonField else { return ["type": "text"] }
        return ["type": "json", "subject_token_field_name": jsonField]
    }

    // MARK: Cloud Resource Manager

    /// Every `GET /v1/projects/{project}`, in order.
    public var projectRequests: [ProjectRequest] { state.withLock { $0.federation.projectRequests } }

    /// Cloud Resource Manager's `projects.get` (v1), which google-auth calls with an external
    /// account's token for its project id: a Bearer token the fake issued, any project (by number:
    /// `projectId` `fake-project`).
    private func project(_ request: FakeRequest, id: String) -> FakeReply {
        let bearer = request.headers.first(name: "Authorization").flatMap {
            $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil
        }
        let issued = state.withLock { state in bearer.flatMap { state.accessTokens[$0] } }
        let reply: FakeReply
        if request.method != .GET {
            reply = .json(405, GoogleErrors.iam(405, message: "Method Not Allowed", status: "UNIMPLEMENTED"))
        } else if let issued, issued.expiresAt > Date() {
            let number = id.allSatisfy(\.isNumber) ? id : "123456"
            let projectID = id.allSatisfy(\.isNumber) ? "fake-project" : id
            reply = .json(
                200,
                FakeJSON.encode([
                    "projectNumber": number, "projectId": projectID, "lifecycleState": "ACTIVE", "name": projectID,
                    "createTime": "2020-01-01T00:00:00.000Z",
                ])
            )
        } else {
            reply = .json(401, GoogleErrors.unauthenticated(expired: issued != nil))
        }
        state.withLock {
            $0.federation.projectRequests.append(ProjectRequest(project: id, status: reply.status, receivedAt: Date()))
        }
        return reply
    }
}
