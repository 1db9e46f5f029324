import TokenWire

/// What a failed IAM Credentials call (`signJwt`, `generateAccessToken`) means, read from its HTTP
/// status and Google's error body (`error.details[].reason`), with what the operator does about it.
struct SignerFault: Sendable, Hashable {
    /// The method that failed.
    var method: IAMCredentialsCall.Method = .signJwt
    /// The HTTP status.
    var status: Int
    /// Google's `details[].reason` (`IAM_PERMISSION_DENIED`, `SERVICE_DISABLED`, ...), if any.
    var reason: String?
    /// Google's `error.status` (`PERMISSION_DENIED`, `NOT_FOUND`, ...), if any.
    var googleStatus: String?
    /// Why the body was not read, when it gives a name twice (``StrictJSON/RepeatedKey``): which
    /// of two reasons counts depends on the reader, so neither picks the operator's fix.
    var ambiguity: String?

    /// Reads the status and reason of a reply body of `method` (bounded by the caller), strictly
    /// (``StrictJSON/object(bytes:)``).
    init(status: Int, body: [UInt8], method: IAMCredentialsCall.Method = .signJwt) {
        self.method = method
        self.status = status
        let object: StrictJSON.Object?
        do {
            object = try StrictJSON.object(bytes: body)
        } catch {
            ambiguity = "its error body gives \(error.printable) twice, so it is not read"
            return
        }
        // No name is given twice anywhere in the body, so the objects inside read as such.
        guard let error = try? object?["error"]?.object() else { return }
        if case .string(let text)? = error["status"] { googleStatus = Self.label(text) }
        guard case .array(let details)? = error["details"] else { return }
        reason = details.lazy.compactMap { detail -> String? in
            guard case .string(let text)? = (try? detail.object())?["reason"] else { return nil }
            return text
        }.first.map(Self.label)
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
            switch method {
            case .signJwt: return "no such service account \(account): check issuers' service_account"
            case .generateAccessToken:
                return "no such service account \(account): check access_tokens' service_account and delegates"
            }
        case (400, _):
            return "the agent's request was refused as malformed: report this as a bug"
        default:
            return nil
        }
    }

    /// The fault as words, e.g. `IAM signJwt for a@b: HTTP 403 IAM_PERMISSION_DENIED`.
    func text(account: String) -> String {
        var text = "IAM \(method.rawValue) for \(account): HTTP \(status)"
        if let label = reason ?? googleStatus { text += " \(label)" }
        if let ambiguity { text += " (\(ambiguity))" }
        if let fix = fix(account: account) { text += "; \(fix)" }
        return text
    }
}
