/// A problem with `metadata_server`'s configuration, naming its key.
public struct MetadataConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The key under `metadata_server` (`listen`, `default`, `project_id`).
    public var key: String
    /// What is wrong.
    public var problem: String

    /// A problem with `key`.
    public init(key: String, _ problem: String) {
        self.key = key
        self.problem = problem
    }

    public var description: String { "metadata_server.\(key): \(problem)" }
}
