/// The metadata endpoint's settings (`metadata_server`): where it listens, which access-token
/// entry `service-accounts/default/` stands for, and the project id it reports.
public struct MetadataServerConfiguration: Sendable, Hashable {
    /// Where it listens (`listen`): a loopback IP literal and port.
    public var listen: MetadataListenAddress
    /// The name of the access-token entry served as `default` (`default`).
    public var defaultEntry: String
    /// The project id served at `project/project-id` (`project_id`); without it, the project in
    /// the default entry's account (`name@PROJECT.iam.gserviceaccount.com`).
    public var projectID: String?

    /// The keys `metadata_server` accepts.
    public static let keys = ["listen", "default", "project_id"]

    /// Settings listening on `listen`, serving entry `defaultEntry` as `default`.
    public init(listen: MetadataListenAddress, defaultEntry: String, projectID: String? = nil) {
        self.listen = listen
        self.defaultEntry = defaultEntry
        self.projectID = projectID
    }

    /// Checks the settings against the entries configured: `default` must name one of them, and
    /// a project id must be 6 to 30 of a-z, 0-9 and `-` (a domain-scoped id, `example.com:name`,
    /// is accepted too).
    /// - Throws: ``MetadataConfigurationError`` for the first problem.
    public func validate(entryNames: Set<String>) throws(MetadataConfigurationError) {
        guard entryNames.contains(defaultEntry) else {
            throw MetadataConfigurationError(key: "default", "\(defaultEntry) is not an entry of access_tokens")
        }
        if let projectID {
            let bytes = projectID.utf8
            let allowed = bytes.allSatisfy {
                ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z"))
                    || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9"))
                    || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: ":")
            }
            guard allowed, (1...100).contains(bytes.count) else {
                throw MetadataConfigurationError(key: "project_id", "is not a project id")
            }
        }
    }
}
