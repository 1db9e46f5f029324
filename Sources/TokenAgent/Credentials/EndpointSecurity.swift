import Foundation

/// Which URLs may carry a Bearer token or a credential: `https://` anywhere, plain `http://` only
/// to this host (loopback), and the metadata server's own `http://` hosts, as Google's libraries
/// allow.
public enum EndpointSecurity {
    /// The metadata server's host names, reached over plain HTTP by design.
    public static let metadataHosts: Set<String> = ["metadata.google.internal", "169.254.169.254"]

    /// Checks `url`; throws a ``ConfigurationError`` naming `key` when it is not `https://` and not
    /// `http://` to a loopback host (or, when `metadata` is set, to the metadata server).
    public static func check(url: String, key: String, metadata: Bool = false) throws {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else {
            throw ConfigurationError(key: key, "must be an https:// URL")
        }
        switch scheme {
        case "https": return
        case "http":
            if isLoopback(host) || (metadata && metadataHosts.contains(host.lowercased())) { return }
            throw ConfigurationError(
                key: key,
                "plain http:// is accepted only to a loopback host (it carries Bearer tokens); use https://"
            )
        default:
            throw ConfigurationError(key: key, "must be an https:// URL")
        }
    }

    /// Whether `host` is this host: `localhost`, an address in 127.0.0.0/8, or `::1`.
    public static func isLoopback(_ host: String) -> Bool {
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if host == "localhost" || host == "::1" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { part in UInt8(part) != nil && !part.isEmpty && part.count <= 3 }
    }
}
