import TokenWire

// The config file's `metadata_server`: the GCE metadata endpoint, read as strictly as the rest.
extension ConfigurationFile {
    /// The keys `metadata_server` accepts; any other is refused.
    public static let metadataServerKeys = MetadataServerContents.CodingKeys.allCases.map(\.rawValue)

    /// `metadata_server` as the file gives it: `listen` and `default` required.
    struct MetadataServerContents: Decodable {
        var listen: String
        var defaultEntry: String
        var projectID: String?
        var requestTimeout: Double?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case listen
            case defaultEntry = "default"
            case projectID = "project_id"
            case requestTimeout = "request_timeout"
        }

        var settings: MetadataServerSettings {
            var settings = MetadataServerSettings(listen: listen, defaultEntry: defaultEntry, projectID: projectID)
            if let requestTimeout { settings.requestTimeout = requestTimeout }
            return settings
        }
    }

    /// Refuses a key `metadata_server` does not accept.
    static func refuseUnknownMetadataServerKeys(_ top: StrictJSON.Object) throws {
        guard let settings = try? top["metadata_server"]?.object() else { return }
        try refuseUnknownKeys(settings.names, allowed: metadataServerKeys, path: "metadata_server.")
    }
}
