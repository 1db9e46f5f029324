/// A configuration that cannot be used: names the key and says why.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The key, as a dotted path in the config file (`providers.vehicle.url`) or a flag name.
    public var key: String
    /// Why the value cannot be used.
    public var reason: String

    /// Creates an error for `key`.
    public init(key: String, _ reason: String) {
        self.key = key
        self.reason = reason
    }

    public var description: String { "configuration key \(key): \(reason)" }
}
