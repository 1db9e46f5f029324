import TokenWire

/// Where an `external_account` file's subject token comes from (`credential_source`), read and
/// checked at start. Each source is read again for every exchange: platform tokens rotate.
enum CredentialSource: Sendable {
    /// A file the platform writes (a Kubernetes projected service-account token, Azure's
    /// `AZURE_FEDERATED_TOKEN_FILE`, any OIDC token): followed through symbolic links.
    case file(path: String, format: SubjectTokenFormat)
    /// A local token endpoint (Azure's instance metadata), asked with `headers`.
    case url(FederationURL, headers: [Header], format: SubjectTokenFormat)
    /// Google's pluggable auth: a program that prints the token.
    case executable(ExecutableSource)
    /// AWS: a signed `GetCallerIdentity` request, from the instance's role or the environment.
    case aws(AWSSource)

    /// A header a `url` source sends.
    struct Header: Sendable, Hashable {
        var name: String
        var value: String
    }

    /// `file`, `url`, `executable` or `aws`: what `status` shows.
    var kind: String {
        switch self {
        case .file: "file"
        case .url: "url"
        case .executable: "executable"
        case .aws: "aws"
        }
    }

    /// The environment variable that allows executable sources, as Google's libraries name it.
    static let allowExecutables = "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES"

    /// Reads `credential_source` of the file at `file`.
    init(_ value: StrictJSON, file: String, environment: [String: String]) throws(ConfigurationError) {
        func refuse(_ text: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(file): credential_source \(text)")
        }
        let object: StrictJSON.Object?
        do { object = try value.object() } catch { throw refuse("\(error)") }
        guard let object else { throw refuse("is not an object") }
        let fields = CredentialsFile.Fields(object: object, path: file)
        if object["certificate"] != nil {
            throw refuse(
                "certificate: X.509 (mTLS) credential sources are left out; use a file, url, executable or aws source"
            )
        }
        // An AWS source names an `url` of its own (the instance's role).
        let present =
            object["environment_id"] != nil
            ? ["environment_id"] + ["file", "executable"].filter { object[$0] != nil }
            : ["file", "url", "executable"].filter { object[$0] != nil }
        guard present.count == 1 else {
            throw refuse(
                present.isEmpty
                    ? "names no source: give one of file, url, executable or environment_id (aws)"
                    : "names more than one source (\(present.joined(separator: ", "))): give one"
            )
        }
        switch present[0] {
        case "file":
            guard let path = try fields.string("file"), path.hasPrefix("/") else {
                throw refuse("file must be an absolute path")
            }
            self = .file(
                path: try fields.withoutControls(path, "credential_source.file"),
                format: try .init(object, file: file)
            )
        case "url":
            let url = try FederationURL(
                try fields.required("url"),
                field: "credential_source.url",
                file: file,
                rule: .tokenSource
            )
            self = .url(
                url,
                headers: try Self.headers(object["headers"], refuse: refuse),
                format: try .init(object, file: file)
            )
        case "executable":
            guard environment[Self.allowExecutables] == "1" else {
                throw refuse(
                    "executable: executable sources are not allowed: set \(Self.allowExecutables)=1 in the agent's "
                        + "environment to run one"
                )
            }
            self = .executable(try ExecutableSource(object["executable"], file: file))
        default:
            self = .aws(try AWSSource(fields: fields, file: file))
        }
    }

    /// A `url` source's `headers`: an object of strings, names of token characters, values
    /// without control characters.
    private static func headers(
        _ value: StrictJSON?,
        refuse: (String) -> ConfigurationError
    ) throws(ConfigurationError) -> [Header] {
        guard let value else { return [] }
        guard case .object(let members) = value else { throw refuse("headers is not an object") }
        var headers: [Header] = []
        var seen: Set<String> = []
        for member in members {
            let tokenCharacters = "!#$%&'*+-.^_`|~"
            guard !member.name.isEmpty,
                member.name.utf8.allSatisfy({ byte in
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                        || tokenCharacters.utf8.contains(byte)
                })
            else { throw refuse("headers has a name that is not an HTTP header name") }
            guard seen.insert(member.name.lowercased()).inserted else {
                throw refuse("headers gives \(member.name) twice")
            }
            guard case .string(let text) = member.value, !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x7F }) else {
                throw refuse("headers.\(member.name) is not a string without control characters")
            }
            headers.append(Header(name: member.name, value: text))
        }
        return headers
    }
}

/// How a `file` or `url` source's body holds the subject token: the whole (trimmed) text, or a
/// field of a JSON object.
enum SubjectTokenFormat: Sendable, Hashable {
    case text
    case json(field: String)

    /// Reads `format` of `source` (`text` when absent).
    init(_ source: StrictJSON.Object, file: String) throws(ConfigurationError) {
        guard let value = source["format"] else {
            self = .text
            return
        }
        func refuse(_ text: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(file): credential_source.format \(text)")
        }
        guard case .object(let members) = value else { throw refuse("is not an object") }
        func string(_ name: String) -> String? {
            for member in members where member.name == name {
                if case .string(let text) = member.value { return text }
            }
            return nil
        }
        switch string("type") ?? "text" {
        case "text":
            self = .text
        case "json":
            guard let field = string("subject_token_field_name"), !field.isEmpty else {
                throw refuse("type json needs subject_token_field_name")
            }
            self = .json(field: field)
        case let other:
            throw refuse("type \(EndpointSecurity.printable(other)) is neither text nor json")
        }
    }
}
