import Logging

extension ProviderSet {
    /// Warns (once per file and mode) about each service-account key file the configuration names
    /// (`issuer_key`, `issuers.<kind>.key_file`) that its group or others may read.
    static func warnAboutExposedKeyFiles(
        _ configuration: AgentConfiguration,
        logger: Logger = Logger(label: "fleet-tokend.issuer")
    ) {
        if let path = configuration.issuerKeyPath {
            SecretFilePermissions.warnIfReadableByOthers(path, what: "issuer_key", logger: logger)
        }
        for (kind, settings) in configuration.issuers.sorted(by: { $0.key < $1.key }) {
            guard let path = settings.keyFile else { continue }
            SecretFilePermissions.warnIfReadableByOthers(path, what: "issuers.\(kind).key_file", logger: logger)
        }
    }
}
