/// Defaults the agent and its clients share: the one place they are written down.
public enum AgentDefaults {
    /// The socket path when nothing names one.
    public static let socketPath = "/run/fleet-tokend/tokens.sock"
    /// The environment variable that names the socket path; an empty value counts as unset.
    public static let socketEnvironmentVariable = "FLEET_TOKEND_SOCKET"

    /// The socket path `environment` names (``socketEnvironmentVariable`` when set and not
    /// empty), else ``socketPath``.
    public static func socketPath(environment: [String: String]) -> String {
        guard let path = environment[socketEnvironmentVariable], !path.isEmpty else { return socketPath }
        return path
    }
}
