import TokenAgent

/// `serve --wait-for-configuration`, the packaged unit's way to start on a configuration that
/// serves nothing (the package installs one): instead of exiting 78, which under socket activation
/// would start the agent again at every connection until systemd failed the socket, the agent
/// starts, says what to configure (`STATUS=`, the log, `PING`, and an `ERR unavailable` to every
/// token request), and serves once a reload applies a configuration with something to serve.
enum ConfigurationWait {
    /// What to configure, for the log, `STATUS=` and the error replies, naming the config file.
    static func reason(configPath: String?) -> String {
        let file = configPath ?? "the configuration (no --config)"
        return "\(file) serves nothing: add a provider (\"providers\"), an issuer (\"issuers\" or \"issuer_key\") "
            + "or an access token (\"access_tokens\"), as in /usr/share/doc/fleet-tokend/fleet-tokend.example.json "
            + "(CONFIG.md); then reload: systemctl reload fleet-tokend"
    }

    /// The reason to wait, when `enabled` and `configuration` serves nothing; else `nil`.
    static func reason(_ configuration: AgentConfiguration, enabled: Bool, configPath: String?) -> String? {
        enabled && configuration.servesNothing ? reason(configPath: configPath) : nil
    }
}
