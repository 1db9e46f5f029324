import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// Finds the host's Application Default Credentials the way Google's client libraries do, and
/// makes the ``AccessTokenSource`` that reads them.
///
/// The order, first found wins:
/// 1. `GOOGLE_APPLICATION_CREDENTIALS`: a credentials file's path (set but unreadable is an
///    error, not a fall-through); else the systemd credential
///    `$CREDENTIALS_DIRECTORY/google-application-credentials` (`LoadCredential=`), when present;
/// 2. gcloud's `application_default_credentials.json` in `$CLOUDSDK_CONFIG`, by default
///    `$HOME/.config/gcloud`, when present;
/// 3. the metadata server, `metadata.google.internal` or `GCE_METADATA_HOST` (`host` or
///    `host:port`). It is not asked at start-up: one that is down fails the fetches, transiently.
///
/// A file is a `service_account` key, an `authorized_user` (gcloud) refresh token, or an
/// `external_account` (Workload Identity Federation, ``ExternalAccountCredentials``); any other
/// type is refused with what to use instead. Every endpoint that would see a secret must be
/// `https`, or plain `http` on loopback (``EndpointSecurity``).
public enum HostCredentials {
    /// Where credentials were found.
    public enum Origin: Sendable, Hashable, CustomStringConvertible {
        /// A credentials file, and how it was found (e.g. `GOOGLE_APPLICATION_CREDENTIALS`).
        case file(path: String, via: String)
        /// The metadata server at `host` (`host` or `host:port`).
        case metadataServer(host: String)

        public var description: String {
            switch self {
            case .file(let path, let via): "\(via) file \(path)"
            case .metadataServer(let host): "metadata server \(host)"
            }
        }
    }

    /// The metadata server's name when `GCE_METADATA_HOST` is not set.
    public static let defaultMetadataHost = "metadata.google.internal"
    /// The name of the systemd credential read from `$CREDENTIALS_DIRECTORY`.
    public static let systemdCredentialName = "google-application-credentials"
    /// The name of gcloud's Application Default Credentials file.
    public static let gcloudFileName = "application_default_credentials.json"

    /// Finds the host's credentials and makes their source.
    ///
    /// - Parameters:
    ///   - environment: The process environment (`ProcessInfo.processInfo.environment`).
    ///   - tuning: Refresh and time-out settings of the source.
    ///   - clock: The agent's clock.
    ///   - logger: Where the source logs (token fingerprints at debug, never a token).
    /// - Throws: ``ConfigurationError`` with key `credentials`: a file named but unreadable, not
    ///   JSON, of an unsupported type, lacking a field, or an endpoint that is not `https`.
    public static func discover(
        environment: [String: String],
        tuning: HostAccessTokenSource.Tuning = .init(),
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger = Logger(label: "fleet-tokend.credentials")
    ) throws(ConfigurationError) -> any AccessTokenSource {
        try source(
            for: locate(environment: environment),
            environment: environment,
            tuning: tuning,
            clock: clock,
            logger: logger
        )
    }

    /// Where the host's credentials are, by the order above; reads no file (only `fileExists`).
    public static func locate(
        environment: [String: String],
        fileExists: (String) -> Bool = { FileManager.default.fileExists(atPath: $0) }
    ) -> Origin {
        func value(_ name: String) -> String? { environment[name].flatMap { $0.isEmpty ? nil : $0 } }
        if let path = value("GOOGLE_APPLICATION_CREDENTIALS") {
            return .file(path: path, via: "GOOGLE_APPLICATION_CREDENTIALS")
        }
        if let directory = value("CREDENTIALS_DIRECTORY") {
            let path = join(directory, systemdCredentialName)
            if fileExists(path) { return .file(path: path, via: "systemd credential") }
        }
        let gcloudDirectory = value("CLOUDSDK_CONFIG") ?? value("HOME").map { join(join($0, ".config"), "gcloud") }
        if let gcloudDirectory {
            let path = join(gcloudDirectory, gcloudFileName)
            if fileExists(path) { return .file(path: path, via: "gcloud application-default") }
        }
        return .metadataServer(host: value("GCE_METADATA_HOST") ?? defaultMetadataHost)
    }

    /// Makes the source for credentials at `origin`, reading and checking its file now;
    /// `environment` is the agent's (an `external_account` file's executable and AWS sources read
    /// it).
    public static func source(
        for origin: Origin,
        environment: [String: String] = [:],
        tuning: HostAccessTokenSource.Tuning = .init(),
        clock: any AgentClock = SystemAgentClock(),
        logger: Logger = Logger(label: "fleet-tokend.credentials")
    ) throws(ConfigurationError) -> HostAccessTokenSource {
        let grant: AccessTokenGrant
        let summary: String
        var digest: String?
        switch origin {
        case .file(let path, let via):
            let read = try CredentialsFile.read(path: path, origin: "\(via) file", environment: environment)
            SecretFilePermissions.warnIfReadableByOthers(path, what: "\(via) credentials file", logger: logger)
            digest = read.digest
            switch read.file {
            case .serviceAccount(let account):
                grant = .serviceAccount(account)
                summary = "service_account \(account.email) key \(account.keyID) (\(origin))"
            case .authorizedUser(let user):
                grant = .authorizedUser(user)
                let quota = user.quotaProject.map { ", quota project \($0)" } ?? ""
                summary = "authorized_user client \(user.clientID)\(quota) (\(origin))"
            case .externalAccount(let account):
                grant = .externalAccount(
                    ExternalAccountExchange(account: account, environment: environment, clock: clock)
                )
                summary = "\(account.summary) (\(origin))"
                if case .file(let tokenPath, _) = account.source {
                    // Kubernetes projects its tokens 0644 by default: used, with a warning.
                    SecretFilePermissions.warnIfReadableByOthers(
                        tokenPath,
                        what: "subject token file (credential_source.file)",
                        logger: logger
                    )
                }
            }
        case .metadataServer(let host):
            try metadataEndpoint(host)
            grant = .metadataServer(host: host)
            summary = "metadata server \(host)"
        }
        return HostAccessTokenSource(
            grant: grant,
            summary: summary,
            identity: digest.map { "\(summary) digest=\($0)" },
            tuning: tuning,
            clock: clock,
            logger: logger
        )
    }

    /// The metadata server at `host` (`GCE_METADATA_HOST`): a bare `host` or `host:port`, loopback
    /// or the metadata server itself; refused otherwise, user-info redacted from the message.
    @discardableResult
    static func metadataEndpoint(_ host: String) throws(ConfigurationError) -> ServiceEndpoint {
        if host.contains(where: { "/?#@ \\".contains($0) }) || host.unicodeScalars.contains(where: { $0.value < 0x21 })
        {
            throw ConfigurationError(
                key: "credentials",
                "metadata host \(EndpointSecurity.printable(host)) (GCE_METADATA_HOST) is not a host or host:port"
            )
        }
        do {
            return try EndpointSecurity.check(url: "http://\(host)", key: "credentials", allowingMetadataServer: true)
        } catch {
            throw ConfigurationError(key: "credentials", "metadata host (GCE_METADATA_HOST): \(error.reason)")
        }
    }

    private static func join(_ directory: String, _ name: String) -> String {
        directory.hasSuffix("/") ? directory + name : directory + "/" + name
    }
}
