import Foundation

/// What a failed IAM Credentials `signJwt` call means, read from its HTTP status and Google's
/// error body (`error.details[].reason`), with what the operator does about it.
struct SignerFault: Sendable, Hashable {
    /// The HTTP status.
    var status: Int
    /// Google's `details[].reason` (`IAM_PERMISSION_DENIED`, `SERVICE_DISABLED`, ...), if any.
    var reason: String?
    /// Google's `error.status` (`PERMISSION_DENIED`, `NOT_FOUND`, ...), if any.
    var googleStatus: String?

    /// Reads the status and reason of a `signJwt` reply body (bounded by the caller).
    init(status: Int, body: [UInt8]) {
        self.status = status
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let error = object["error"] as? [String: Any]
        else { return }
        googleStatus = (error["status"] as? String).map(Self.label)
        let details = error["details"] as? [[String: Any]] ?? []
        reason = details.lazy.compactMap { $0["reason"] as? String }.first.map(Self.label)
    }

    /// A short label of letters, digits and `_` only, at most 64: never a line break or a secret
    /// from a hostile body.
    private static func label(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.filter {
                    $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_")
                }.prefix(64)
            )
        )
    }

    /// What to fix, for the log line and the error text; `nil` for a fault that is not the
    /// operator's (429, 5xx).
    func fix(account: String) -> String? {
        switch (status, reason) {
        case (403, "IAM_PERMISSION_DENIED"?):
            return "grant the host's identity roles/iam.serviceAccountTokenCreator on \(account)"
        case (403, "SERVICE_DISABLED"?):
            return "enable iamcredentials.googleapis.com in the host identity's project"
        case (403, "ACCESS_TOKEN_SCOPE_INSUFFICIENT"?):
            return "the VM's access scopes lack cloud-platform: set --scopes=cloud-platform"
        case (403, _):
            return "check the host identity's permissions on \(account) (Service Account Token Creator)"
        case (404, _):
            return "no such service account \(account): check issuers' service_account"
        case (400, _):
            return "the agent's request was refused as malformed: report this as a bug"
        default:
            return nil
        }
    }

    /// The fault as words, e.g. `IAM signJwt for a@b: HTTP 403 IAM_PERMISSION_DENIED`.
    func text(account: String) -> String {
        var text = "IAM signJwt for \(account): HTTP \(status)"
        if let label = reason ?? googleStatus { text += " \(label)" }
        if let fix = fix(account: account) { text += "; \(fix)" }
        return text
    }
}
