import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// An `external_account` credentials file (Workload Identity Federation, as `gcloud iam
/// workload-identity-pools create-cred-config` writes it), read and checked at start: where the
/// subject token comes from (``CredentialSource``), the Security Token Service (STS) that
/// exchanges it, and the service account impersonated with the federated token, if any.
///
/// Left out, and refused by name: workforce pools (`workforce_pool_user_project`), certificate
/// (X.509) sources, and a universe other than `googleapis.com`.
struct ExternalAccountCredentials: Sendable, CustomStringConvertible {
    /// The impersonated account and how long its tokens live.
    struct Impersonation: Sendable, Hashable {
        /// `service_account_impersonation_url`.
        var url: FederationURL
        /// The account the URL names.
        var account: String
        /// `service_account_impersonation.token_lifetime_seconds`, 600 to 43,200 (3,600 unless set).
        var lifetime: Int
    }

    /// STS client authentication (`client_id`, `client_secret`), sent as HTTP Basic.
    struct Client: Sendable, Hashable, CustomStringConvertible {
        var id: String
        var secret: String?
        /// The client's id, never its secret.
        var description: String { "client \(id)" }
    }

    /// The subject token types STS takes.
    static let subjectTokenTypes: Set<String> = [
        "urn:ietf:params:oauth:token-type:jwt", "urn:ietf:params:oauth:token-type:id_token",
        "urn:ietf:params:oauth:token-type:saml2", "urn:ietf:params:aws:token-type:aws4_request",
    ]
    /// The lifetime of an impersonated token unless the file sets one, seconds.
    static let defaultLifetime = 3600
    /// The lifetimes IAM grants, seconds.
    static let lifetimes = 600...43200

    let path: String
    let audience: String
    let subjectTokenType: String
    let tokenURL: FederationURL
    let impersonation: Impersonation?
    let source: CredentialSource
    let quotaProject: String?
    let client: Client?

    /// `<pool>/<provider>` from the audience, or the audience itself when it is not a workload
    /// identity pool provider's.
    var poolAndProvider: String {
        let parts = audience.split(separator: "/").map(String.init)
        if let pool = parts.firstIndex(of: "workloadIdentityPools"), pool + 3 < parts.count,
            parts[pool + 2] == "providers"
        {
            return parts[pool + 1] + "/" + parts[pool + 3]
        }
        return audience
    }

    /// What `status` shows: the source, the pool and provider, and whom it impersonates; never a
    /// secret.
    var summary: String {
        let whom = impersonation.map { "impersonating \($0.account)" } ?? "federated token (no impersonation)"
        return "external_account (\(source.kind)) via \(poolAndProvider), \(whom)"
    }

    var description: String { "\(summary) (\(path))" }

    /// Reads the fields of an `external_account` file; `environment` is the agent's (whether
    /// executables are allowed, and AWS's variables).
    init(fields: CredentialsFile.Fields, environment: [String: String]) throws(ConfigurationError) {
        let path = fields.path
        func refuse(_ text: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(path): \(text)")
        }
        if let universe = try fields.string("universe_domain"), !universe.isEmpty, universe != "googleapis.com" {
            throw refuse(
                "universe_domain \(EndpointSecurity.printable(universe)) is not googleapis.com: only Google Cloud's "
                    + "own universe is supported"
            )
        }
        if fields.object["workforce_pool_user_project"] != nil {
            throw refuse(
                "workforce_pool_user_project: workforce identity federation (people signing in) is left out; "
                    + "fleet-tokend takes a workload identity pool's credentials"
            )
        }
        self.path = path
        audience = try fields.withoutControls(try fields.required("audience"), "audience")
        let type = try fields.required("subject_token_type")
        guard Self.subjectTokenTypes.contains(type) else {
            throw refuse(
                "subject_token_type \(EndpointSecurity.printable(type)) is none of "
                    + Self.subjectTokenTypes.sorted().joined(separator: ", ")
            )
        }
        subjectTokenType = type
        tokenURL = try FederationURL(try fields.required("token_url"), field: "token_url", file: path, rule: .endpoint)
        if let info = try fields.string("token_info_url"), !info.isEmpty {
            _ = try FederationURL(info, field: "token_info_url", file: path, rule: .endpoint)
        }
        impersonation = try Self.impersonation(fields)
        quotaProject = try fields.string("quota_project_id").flatMap { $0.isEmpty ? nil : $0 }.map {
            (value) throws(ConfigurationError) in try fields.withoutControls(value, "quota_project_id")
        }
        if let id = try fields.string("client_id"), !id.isEmpty {
            client = Client(id: try fields.withoutControls(id, "client_id"), secret: try fields.string("client_secret"))
        } else if try fields.string("client_secret") != nil {
            throw refuse("client_secret without client_id")
        } else {
            client = nil
        }
        guard let sourceValue = fields.object["credential_source"] else { throw refuse("lacks credential_source") }
        source = try CredentialSource(sourceValue, file: path, environment: environment)
        if case .aws = source, type != "urn:ietf:params:aws:token-type:aws4_request" {
            throw refuse(
                "an aws credential source needs subject_token_type urn:ietf:params:aws:token-type:aws4_request"
            )
        }
    }

    /// The impersonation URL (`…/serviceAccounts/<account>:generateAccessToken`) and lifetime.
    private static func impersonation(_ fields: CredentialsFile.Fields) throws(ConfigurationError) -> Impersonation? {
        let path = fields.path
        guard let text = try fields.string("service_account_impersonation_url"), !text.isEmpty else {
            if fields.object["service_account_impersonation"] != nil {
                throw ConfigurationError(
                    key: "credentials",
                    "credentials file \(path): service_account_impersonation without service_account_impersonation_url"
                )
            }
            return nil
        }
        let url = try FederationURL(text, field: "service_account_impersonation_url", file: path, rule: .impersonation)
        let marker = IAMCredentialsRequest.accountMarker
        let suffix = IAMCredentialsCall.Method.generateAccessToken.pathSuffix
        guard let start = url.path.ranges(of: marker).last, url.path.hasSuffix(suffix) else {
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(path): service_account_impersonation_url \(url) does not end in "
                    + "/serviceAccounts/<account>:generateAccessToken"
            )
        }
        let account = String(url.path[start.upperBound...].dropLast(suffix.count))
            .replacing("%40", with: "@")
        guard !account.isEmpty, !account.contains("/"), !account.contains(":") else {
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(path): service_account_impersonation_url names no service account"
            )
        }
        var lifetime = defaultLifetime
        if let options = fields.object["service_account_impersonation"] {
            let object: StrictJSON.Object?
            do { object = try options.object() } catch {
                throw ConfigurationError(key: "credentials", "credentials file \(path): \(error)")
            }
            guard let object else {
                throw ConfigurationError(
                    key: "credentials",
                    "credentials file \(path): service_account_impersonation is not an object"
                )
            }
            if let value = object["token_lifetime_seconds"] {
                guard case .number(let seconds) = value, seconds == seconds.rounded(), lifetimes.contains(Int(seconds))
                else {
                    throw ConfigurationError(
                        key: "credentials",
                        "credentials file \(path): service_account_impersonation.token_lifetime_seconds must be a "
                            + "whole number from \(lifetimes.lowerBound) to \(lifetimes.upperBound)"
                    )
                }
                lifetime = Int(seconds)
            }
        }
        return Impersonation(url: url, account: account, lifetime: lifetime)
    }
}
