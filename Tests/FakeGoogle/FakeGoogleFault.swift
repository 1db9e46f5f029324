/// The APIs the fake serves.
public enum FakeGoogleAPI: String, Sendable, Hashable, CaseIterable {
    /// The metadata server's token path.
    case metadata
    /// The OAuth 2.0 token endpoint (`POST /token`).
    case oauthToken
    /// IAM Credentials `signJwt`.
    case iamCredentials
    /// IAM Credentials `generateAccessToken`.
    case generateAccessToken
    /// Google's Security Token Service (`POST /v1/token`): OAuth's dialect.
    case sts
    /// The AWS instance metadata service (`/latest/...`): text, as IMDS answers.
    case awsMetadata
    /// Azure's instance metadata token path: OAuth-shaped JSON, as Azure's IMDS answers.
    case azureMetadata
}

/// A failure the fake answers with instead of doing its work, scripted with
/// ``FakeGoogle/inject(_:into:times:account:)``. Each API answers in its own dialect: IAM
/// Credentials with Google's error JSON (`{"error":{"code","message","status","details"}}`), the
/// token endpoint and STS with OAuth's (`{"error","error_description"}`), the metadata servers
/// (Google's, AWS's) with text, Azure's metadata with OAuth-shaped JSON.
public enum FakeGoogleFault: Sendable, Hashable {
    /// 401: IAM `UNAUTHENTICATED` (`ACCESS_TOKEN_EXPIRED`); OAuth `invalid_client`.
    case unauthorized
    /// 403 `PERMISSION_DENIED` with an `ErrorInfo` of this reason; OAuth `access_denied`.
    case permissionDenied(PermissionDeniedReason)
    /// 404: IAM `NOT_FOUND`; elsewhere a text 404.
    case notFound
    /// 400: IAM `INVALID_ARGUMENT`; OAuth `invalid_grant`.
    case badRequest
    /// 429 (`RESOURCE_EXHAUSTED`), with `Retry-After: N` when given.
    case tooManyRequests(retryAfterSeconds: Int?)
    /// A 5xx of this status (`INTERNAL` for 500, `UNAVAILABLE` for 503 in IAM's dialect).
    case serverError(status: Int)
    /// Closes the connection without answering.
    case dropConnection
    /// Never answers (the client's time-out ends the request).
    case hang
    /// Sends a `200` head promising a 4 KiB JSON body, then one byte of it every
    /// `intervalMilliseconds` (a slow-drip server: the head on time, the body never).
    case drip(intervalMilliseconds: Int)
    /// Answers exactly this: a hostile or malformed reply, in any API's place.
    case raw(status: Int, body: [UInt8], headers: [String: String] = [:])

    /// The reasons of a 403 that IAM Credentials gives.
    public enum PermissionDeniedReason: String, Sendable, Hashable, CaseIterable {
        /// The caller lacks `iam.serviceAccounts.signJwt` (domain `iam.googleapis.com`).
        case iamPermissionDenied = "IAM_PERMISSION_DENIED"
        /// The IAM Credentials API is not enabled in the caller's project (domain `googleapis.com`).
        case serviceDisabled = "SERVICE_DISABLED"
        /// The access token lacks the `cloud-platform` scope (domain `googleapis.com`).
        case accessTokenScopeInsufficient = "ACCESS_TOKEN_SCOPE_INSUFFICIENT"
    }
}

/// Google's error bodies, as the real APIs send them.
enum GoogleErrors {
    static let signJwtMethod = "google.iam.credentials.v1.IAMCredentials.SignJwt"
    static let iamService = "iamcredentials.googleapis.com"
    static let fakeProjectNumber = "123456789012"

    /// The IAM Credentials (Google API) error body for `status`.
    static func iam(_ code: Int, message: String, status: String, details: [[String: Any]] = []) -> [UInt8] {
        var error: [String: Any] = ["code": code, "message": message, "status": status]
        if !details.isEmpty { error["details"] = details }
        return FakeJSON.encode(["error": error])
    }

    static func errorInfo(reason: String, domain: String, metadata: [String: String]) -> [String: Any] {
        [
            "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain,
            "metadata": metadata,
        ]
    }

    /// 401 for a missing, unknown or expired access token.
    static func unauthenticated(expired: Bool) -> [UInt8] {
        iam(
            401,
            message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or "
                + "other valid authentication credential. See "
                + "https://developers.google.com/identity/sign-in/web/devconsole-project.",
            status: "UNAUTHENTICATED",
            details: [
                errorInfo(
                    reason: expired ? "ACCESS_TOKEN_EXPIRED" : "CREDENTIALS_MISSING",
                    domain: "googleapis.com",
                    metadata: ["service": iamService, "method": signJwtMethod]
                )
            ]
        )
    }

    static func permissionDenied(
        _ reason: FakeGoogleFault.PermissionDeniedReason,
        account: String,
        permission: String = "iam.serviceAccounts.signJwt"
    ) -> [UInt8] {
        switch reason {
        case .iamPermissionDenied:
            return iam(
                403,
                message: "Permission '\(permission)' denied on resource (or it may not exist).",
                status: "PERMISSION_DENIED",
                details: [
                    errorInfo(
                        reason: reason.rawValue,
                        domain: "iam.googleapis.com",
                        metadata: [
                            "permission": permission,
                            "resource": "projects/-/serviceAccounts/\(account)",
                        ]
                    )
                ]
            )
        case .serviceDisabled:
            let url =
                "https://console.developers.google.com/apis/api/\(iamService)/overview?project=\(fakeProjectNumber)"
            return iam(
                403,
                message: "IAM Service Account Credentials API has not been used in project \(fakeProjectNumber) before "
                    + "or it is disabled. Enable it by visiting \(url) then retry. If you enabled this API recently, "
                    + "wait a few minutes for the action to propagate to our systems and retry.",
                status: "PERMISSION_DENIED",
                details: [
                    [
                        "@type": "type.googleapis.com/google.rpc.Help",
                        "links": [["description": "Google developers console API activation", "url": url]],
                    ],
                    errorInfo(
                        reason: reason.rawValue,
                        domain: "googleapis.com",
                        metadata: [
                            "consumer": "projects/\(fakeProjectNumber)", "service": iamService,
                            "activationUrl": url, "serviceTitle": "IAM Service Account Credentials API",
                        ]
                    ),
                ]
            )
        case .accessTokenScopeInsufficient:
            return iam(
                403,
                message: "Request had insufficient authentication scopes.",
                status: "PERMISSION_DENIED",
                details: [
                    errorInfo(
                        reason: reason.rawValue,
                        domain: "googleapis.com",
                        metadata: ["service": iamService, "method": signJwtMethod]
                    )
                ]
            )
        }
    }

    static func notFound(account: String) -> [UInt8] {
        iam(404, message: "Not found; Gaia id not found for email \(account)", status: "NOT_FOUND")
    }

    static func invalidArgument(_ message: String) -> [UInt8] {
        iam(400, message: message, status: "INVALID_ARGUMENT")
    }

    static func resourceExhausted() -> [UInt8] {
        iam(
            429,
            message: "Quota exceeded for quota metric 'Sign JWT requests' and limit 'Sign JWT requests per minute' "
                + "of service '\(iamService)' for consumer 'project_number:\(fakeProjectNumber)'.",
            status: "RESOURCE_EXHAUSTED"
        )
    }

    static func server(_ code: Int) -> [UInt8] {
        code == 503
            ? iam(503, message: "The service is currently unavailable.", status: "UNAVAILABLE")
            : iam(code, message: "Internal error encountered.", status: "INTERNAL")
    }

    /// An OAuth 2.0 error body (RFC 6749 §5.2).
    static func oauth(_ error: String, _ description: String) -> [UInt8] {
        FakeJSON.encode(["error": error, "error_description": description])
    }
}
