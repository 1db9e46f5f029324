import TokenWire

// The config file's `access_tokens`: one object per entry, read as strictly as the rest.
extension ConfigurationFile {
    /// The keys each entry of `access_tokens` accepts; any other is refused.
    public static let accessTokenKeys = AccessTokenContents.CodingKeys.allCases.map(\.rawValue)

    /// One entry as the file gives it.
    struct AccessTokenContents: Decodable {
        var source: String?
        var serviceAccount: String?
        var scopes: [String]?
        var lifetime: Double?
        var delegates: [String]?
        var callsPerMinute: Double?
        var allow: PrincipalListContents?

        enum CodingKeys: String, CodingKey, CaseIterable {
            case source
            case serviceAccount = "service_account"
            case scopes, lifetime, delegates
            case callsPerMinute = "calls_per_minute"
            case allow
        }
    }

    /// Refuses a key no entry of `access_tokens`, or no entry's `allow`, accepts.
    static func refuseUnknownAccessTokenKeys(_ top: StrictJSON.Object) throws {
        guard let entries = try? top["access_tokens"]?.object() else { return }
        for member in entries.members {
            guard let settings = try? member.value.object() else { continue }
            let path = "access_tokens.\(member.name)."
            try refuseUnknownKeys(settings.names, allowed: accessTokenKeys, path: path)
            guard let allow = settings["allow"] else { continue }
            guard let list = try? allow.object() else {
                throw ConfigurationError(key: path + "allow", "must be an object with users and groups")
            }
            try refuseUnknownKeys(list.names, allowed: principalListKeys, path: path + "allow.")
        }
    }

    /// The entries as settings; an unknown `source` is refused naming its key.
    static func accessTokens(_ entries: [String: AccessTokenContents]) throws -> [String: AccessTokenSettings] {
        var settings: [String: AccessTokenSettings] = [:]
        for (name, entry) in entries {
            var source: AccessTokenSettings.Source?
            if let text = entry.source {
                guard let known = AccessTokenSettings.Source(rawValue: text) else {
                    throw ConfigurationError(
                        key: "access_tokens.\(name).source",
                        "must be one of \(AccessTokenSettings.Source.allCases.map(\.rawValue).joined(separator: ", "))"
                    )
                }
                source = known
            }
            var setting = AccessTokenSettings(hostAllowedTo: PrincipalList())
            setting.source = source
            setting.serviceAccount = entry.serviceAccount
            setting.scopes = entry.scopes
            setting.lifetime = entry.lifetime
            setting.delegates = entry.delegates
            setting.callsPerMinute = entry.callsPerMinute
            setting.allow = entry.allow?.list
            settings[name] = setting
        }
        return settings
    }
}
