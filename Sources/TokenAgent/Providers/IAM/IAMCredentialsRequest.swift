import TokenWire

/// An IAM Credentials request as each of its three callers sends it (``IAMSigner``'s `signJwt`,
/// ``ImpersonatedAccessTokens``' `generateAccessToken`, and a federated host identity's
/// impersonation in ``ExternalAccountExchange``): `POST` of a JSON body to
/// `…/v1/projects/-/serviceAccounts/{account}:{method}`, authorized by a Bearer token. Their 200
/// replies are read by ``IAMCredentialsReply`` (strict JSON, faults named by the method).
///
/// What each caller makes of the HTTP status differs, and stays with the caller: the host's
/// signer and access tokens hold calls off on the operator's faults (``IAMCredentialsCall``); a
/// federated impersonation makes the host's credentials, so it fails as ``CredentialsError`` and a
/// 401 drops the federated token.
enum IAMCredentialsRequest {
    /// Where a method's path names the service account: `/serviceAccounts/`.
    static let accountMarker = "/serviceAccounts/"

    /// The path of `method` for `account` (a service account's email): `@` stays as it is (a
    /// path may hold it, and Google's libraries send it so); anything that could end the path
    /// segment (`/`, `?`, `#`) is escaped.
    static func path(account: String, method: IAMCredentialsCall.Method) -> String {
        "/v1/projects/-" + accountMarker + PercentEncoding.encode(account, alsoKeeping: "@") + method.pathSuffix
    }

    /// The request's headers: the Bearer token, JSON both ways, and `x-goog-user-project` for a
    /// gcloud user with a quota project.
    static func headers(bearer: String, quotaProject: String? = nil) -> [(String, String)] {
        var headers = [
            ("Authorization", "Bearer " + bearer), ("Content-Type", "application/json"), ("Accept", "application/json"),
        ]
        if let quotaProject { headers.append(("x-goog-user-project", quotaProject)) }
        return headers
    }
}

extension IAMCredentialsCall.Method {
    /// What a path of this method ends in: `:signJwt`, `:generateAccessToken`.
    var pathSuffix: String { ":" + rawValue }
}
