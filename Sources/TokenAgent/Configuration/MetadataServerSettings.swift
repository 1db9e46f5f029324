/// The GCE metadata endpoint's settings as the config file gives them (`metadata_server`,
/// docs/CONFIG.md "Metadata server"): where it listens, which access-token entry
/// `service-accounts/default/` stands for, and the project id it reports. Checked by
/// ``AgentConfiguration/validate()`` (``AgentConfiguration/metadataServerConfiguration()``).
public struct MetadataServerSettings: Sendable, Hashable {
    /// Where it listens (`listen`): a loopback IP literal and a port, `127.0.0.1:8989`.
    public var listen: String
    /// The access-token entry served as `default` (`default`).
    public var defaultEntry: String
    /// The project id served at `project/project-id` (`project_id`).
    public var projectID: String?
    /// Seconds from a request's first byte to its last (`request_timeout`, 0.1 to 60): a request
    /// not whole by then closes its connection, however steadily it trickles.
    public var requestTimeout: Double = MetadataServerSettings.defaultRequestTimeout

    /// `request_timeout`'s default: 10 s.
    public static let defaultRequestTimeout: Double = 10

    /// Settings listening on `listen`, serving entry `defaultEntry` as `default`.
    public init(listen: String, defaultEntry: String, projectID: String? = nil) {
        self.listen = listen
        self.defaultEntry = defaultEntry
        self.projectID = projectID
    }
}
