import TokenWire
import _CryptoExtras

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// An Application Default Credentials file, read: a service-account key, a gcloud user's
/// refresh token, or a workload identity pool's `external_account` configuration. Other types are
/// refused at start-up with what to use instead.
enum CredentialsFile: Sendable, CustomStringConvertible {
    case serviceAccount(ServiceAccountCredentials)
    case authorizedUser(AuthorizedUserCredentials)
    case externalAccount(ExternalAccountCredentials)

    /// What the file is, never a secret from it.
    var description: String {
        switch self {
        case .serviceAccount(let account): "\(account)"
        case .authorizedUser(let user): "\(user)"
        case .externalAccount(let account): "\(account)"
        }
    }

    /// Google's OAuth 2.0 token endpoint, for files that name none.
    static let defaultTokenURI = "https://oauth2.googleapis.com/token"

    /// The types Google's libraries know that this agent does not sign with, and why.
    static let unsupportedTypes: [String: String] = [
        "external_account_authorized_user": "workforce identity federation",
        "impersonated_service_account": "service-account impersonation",
        "gdch_service_account": "Google Distributed Cloud Hosted",
    ]

    /// Reads the file at `path` (named `origin` in errors: how it was found), with a digest of its
    /// contents (the first 16 hex digits of their SHA-256): a regular file of at most 1 MiB
    /// (``BoundedFile/credentialsLimit``), refused otherwise before more than that is read.
    static func read(
        path: String,
        origin: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> (
        file: CredentialsFile, digest: String
    ) {
        let bytes: [UInt8]
        do {
            bytes = try BoundedFile.read(path, limit: BoundedFile.credentialsLimit)
        } catch {
            let reason =
                switch error.problem {
                case .unreadable(missing: true): "\(path) does not exist"
                case .unreadable(missing: false): "\(path) cannot be read"
                case .notRegular, .overLimit: "\(error)"
                }
            throw ConfigurationError(key: "credentials", "\(origin) \(reason)")
        }
        return (try parse(Data(bytes), path: path, environment: environment), ProviderSet.digest(bytes))
    }

    /// Reads credentials JSON from `data`; `path` names the file in errors; `environment` is the
    /// agent's (an `external_account` file's executable and AWS sources read it).
    static func parse(
        _ data: Data,
        path: String,
        environment: [String: String] = [:]
    ) throws(ConfigurationError) -> CredentialsFile {
        let object: StrictJSON.Object?
        do {
            object = data.count <= BoundedFile.credentialsLimit ? try StrictJSON.object(bytes: data) : nil
        } catch {
            throw ConfigurationError(key: "credentials", "credentials file \(path): \(error)")
        }
        guard let object else {
            // Where the JSON breaks, never what is there (the file holds a secret).
            var syntax = ""
            if data.count <= BoundedFile.credentialsLimit, case .failure(let error) = StrictJSON.parse(bytes: data) {
                syntax = " (not valid JSON at \(error.position))"
            }
            throw ConfigurationError(key: "credentials", "credentials file \(path) is not a JSON object\(syntax)")
        }
        let fields = Fields(object: object, path: path)
        let type = try fields.string("type")
        switch type {
        case "service_account":
            return .serviceAccount(try ServiceAccountCredentials(fields: fields))
        case "authorized_user":
            return .authorizedUser(try AuthorizedUserCredentials(fields: fields))
        case "external_account":
            return .externalAccount(try ExternalAccountCredentials(fields: fields, environment: environment))
        case nil:
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(path) has no \"type\": expected service_account, authorized_user or "
                    + "external_account. "
                    + insteadAdvice
            )
        case let type?:
            let what = unsupportedTypes[type].map { " (\($0))" } ?? ""
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(path) has type \(EndpointSecurity.printable(type))\(what), which fleet-tokend "
                    + "cannot use: only service_account, authorized_user and external_account credentials are "
                    + "supported. "
                    + insteadAdvice
            )
        }
    }

    static let insteadAdvice =
        "Instead, use a service-account key file (issuers.<kind>.key_file, where keys are allowed), "
        + "or an HTTP token provider."

    /// The string fields of a credentials file, read strictly (no name twice).
    struct Fields {
        let object: StrictJSON.Object
        let path: String

        /// The field's value; `nil` when absent; an error when not a string.
        func string(_ name: String) throws(ConfigurationError) -> String? {
            guard let value = object[name] else { return nil }
            guard case .string(let value) = value else {
                throw ConfigurationError(key: "credentials", "credentials file \(path): \(name) is not a string")
            }
            return value
        }

        /// The field's non-empty value; an error when missing.
        func required(_ name: String) throws(ConfigurationError) -> String {
            guard let value = try string(name), !value.isEmpty else {
                throw ConfigurationError(key: "credentials", "credentials file \(path) lacks \(name)")
            }
            return value
        }

        /// `value` of field `name`, refused when it holds a control character (CR, LF, NUL, DEL or
        /// any other below space): such a value sent as a header fails every request, and written
        /// to a log forges lines.
        func withoutControls(_ value: String, _ name: String) throws(ConfigurationError) -> String {
            guard value.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else { return value }
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(path): \(name) holds a control character (CR, LF, NUL, DEL or another)"
            )
        }

        /// The token endpoint (`token_uri`, Google's by default) as written (an assertion's `aud`)
        /// and as its parts (``ServiceEndpoint``, which the request's URL is built from).
        func tokenURI() throws(ConfigurationError) -> (text: String, endpoint: ServiceEndpoint) {
            let uri = try string("token_uri").flatMap { $0.isEmpty ? nil : $0 } ?? CredentialsFile.defaultTokenURI
            do {
                return (uri, try EndpointSecurity.check(url: uri, key: "credentials"))
            } catch {
                throw ConfigurationError(key: "credentials", "token_uri of \(path): \(error.reason)")
            }
        }
    }
}

/// A service-account key file: signs its own JWT-bearer assertions (RFC 7523) for the token
/// endpoint.
struct ServiceAccountCredentials: Sendable, CustomStringConvertible {
    let email: String
    /// The token endpoint as written: the assertion's `aud`.
    let tokenURI: String
    /// The token endpoint's parts, which requests are sent to.
    let tokenEndpoint: ServiceEndpoint
    let path: String
    /// The key (`private_key`) and its id (`private_key_id`), which sign the assertions.
    private let signer: RS256Signer
    /// The key's id (`private_key_id`).
    var keyID: String { signer.keyID }

    /// The account, its key's id and the file: never the key.
    var description: String { "service_account \(email) key \(keyID) (\(path))" }

    /// The scope asked for: every Google Cloud API the account's roles allow (IAM Credentials
    /// among them).
    static let scope = "https://www.googleapis.com/auth/cloud-platform"
    /// The lifetime of an assertion, seconds (the most Google accepts).
    static let assertionLifetime: Int64 = 3600

    init(fields: CredentialsFile.Fields) throws(ConfigurationError) {
        email = try fields.withoutControls(try fields.required("client_email"), "client_email")
        let keyID = try fields.withoutControls(try fields.required("private_key_id"), "private_key_id")
        let token = try fields.tokenURI()
        tokenURI = token.text
        tokenEndpoint = token.endpoint
        path = fields.path
        do {
            let key = try _RSA.Signing.PrivateKey(pemRepresentation: try fields.required("private_key"))
            signer = RS256Signer(key: key, keyID: keyID)
        } catch let error as ConfigurationError {
            throw error
        } catch {
            throw ConfigurationError(
                key: "credentials",
                "credentials file \(fields.path): private_key is not an RSA private key in PEM form"
            )
        }
    }

    /// The signed assertion (``RS256Signer``: header kid = `private_key_id`; claims iss, scope,
    /// aud = token URI, iat = `now`, exp = iat + one hour).
    func assertion(now: Double) throws -> String {
        let issuedAt = Int64(now.rounded(.down))
        let claims = AssertionClaims(
            iss: email,
            scope: Self.scope,
            aud: tokenURI,
            iat: issuedAt,
            exp: issuedAt + Self.assertionLifetime
        )
        return try signer.token(claims: claims)
    }

    private struct AssertionClaims: Encodable {
        var iss: String
        var scope: String
        var aud: String
        var iat: Int64
        var exp: Int64
    }
}

/// A gcloud user's credentials (`gcloud auth application-default login`): a refresh token and
/// the OAuth client it was issued to.
struct AuthorizedUserCredentials: Sendable, CustomStringConvertible {
    let clientID: String
    let clientSecret: String
    let refreshToken: String
    /// The token endpoint's parts, which requests are sent to.
    let tokenEndpoint: ServiceEndpoint
    let quotaProject: String?
    let path: String

    init(fields: CredentialsFile.Fields) throws(ConfigurationError) {
        clientID = try fields.withoutControls(try fields.required("client_id"), "client_id")
        clientSecret = try fields.required("client_secret")
        refreshToken = try fields.required("refresh_token")
        tokenEndpoint = try fields.tokenURI().endpoint
        let quotaProject = try fields.string("quota_project_id").flatMap { $0.isEmpty ? nil : $0 }
        self.quotaProject = try quotaProject.map { (value) throws(ConfigurationError) in
            try fields.withoutControls(value, "quota_project_id")
        }
        path = fields.path
    }

    /// The OAuth client and the file: never the client secret or the refresh token.
    var description: String { "authorized_user client \(clientID) (\(path))" }
}
