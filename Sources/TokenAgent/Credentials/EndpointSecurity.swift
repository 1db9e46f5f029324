#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Which URLs may carry Bearer tokens and OAuth secrets: `https` anywhere, plain `http` only to
/// this host (loopback) or to Google's metadata server.
///
/// A token endpoint, the metadata server and the IAM Credentials API all see secrets (a signed
/// assertion, a refresh token and client secret, an access token). Over plain `http` anyone on
/// the path reads them, so plain `http` is accepted only where nobody is on the path: loopback
/// (`127.0.0.0/8`, `::1`, `localhost`), which is where test fakes and local proxies live. The one
/// exception is the one Google's own libraries make: the metadata server
/// (`metadata.google.internal`, `169.254.169.254`) speaks only `http`, on a link-local path that
/// never leaves the host's hypervisor.
public enum EndpointSecurity {
    /// The metadata server's names that plain `http` is accepted for (with `allowingMetadataServer`).
    public static let metadataServerHosts: Set<String> = ["metadata.google.internal", "169.254.169.254"]

    /// Checks that `url` may carry secrets and is an endpoint, nothing more (``ServiceEndpoint``):
    /// an absolute `https` URL with a host, or an `http` URL to a loopback host (or, when
    /// `allowingMetadataServer`, to the metadata server); an optional port and path prefix; no
    /// query, fragment or user-info.
    ///
    /// - Parameters:
    ///   - url: The URL as configured.
    ///   - key: The configuration key (or file and field) that named it, for the error.
    ///   - allowingMetadataServer: Whether `http` to ``metadataServerHosts`` is accepted.
    /// - Returns: The endpoint, to build request URLs from.
    /// - Throws: ``ConfigurationError`` naming `key` and saying why the URL is refused.
    @discardableResult
    public static func check(
        url: String,
        key: String,
        allowingMetadataServer: Bool = false
    ) throws(ConfigurationError) -> ServiceEndpoint {
        try ServiceEndpoint(url, key: key, allowingMetadataServer: allowingMetadataServer)
    }

    /// Refuses a scheme other than `https`, and plain `http` to a host other than loopback (or the
    /// metadata server, when `allowingMetadataServer`). `text` is the whole URL, for the message.
    static func checkTransport(
        scheme: String,
        host: String,
        text: String,
        key: String,
        allowingMetadataServer: Bool
    ) throws(ConfigurationError) {
        switch scheme {
        case "https":
            return
        case "http":
            let bare = host.lowercased()
            if isLoopback(host: bare) { return }
            if allowingMetadataServer, metadataServerHosts.contains(bare) { return }
            let allowed = allowingMetadataServer ? "loopback or the metadata server" : "loopback"
            throw ConfigurationError(
                key: key,
                "plain http to \(printable(host)) would send tokens and secrets in the clear: use https (plain http is "
                    + "accepted only to \(allowed))"
            )
        default:
            throw ConfigurationError(key: key, "\(printable(text)): scheme \(printable(scheme)) is not https")
        }
    }

    /// Whether `host` (no brackets, no port) names this machine: `localhost`, an IPv4 address in
    /// `127.0.0.0/8`, or `::1` in any spelling.
    public static func isLoopback(host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" { return true }
        let octets = host.split(separator: ".", omittingEmptySubsequences: false)
        if octets.count == 4, octets.allSatisfy({ $0.count <= 3 && UInt8($0) != nil }) {
            return octets[0] == "127"
        }
        if host.contains(":") {
            var address = in6_addr()
            guard inet_pton(AF_INET6, host, &address) == 1 else { return false }
            return withUnsafeBytes(of: &address) { bytes in
                bytes.prefix(15).allSatisfy { $0 == 0 } && bytes[15] == 1
            }
        }
        return false
    }

    /// `text` with any user-info redacted (``redactingUserInfo(_:)``), anything but printable ASCII
    /// replaced, at most 200 characters, quoted: safe in a message.
    static func printable(_ text: String) -> String {
        let text = redactingUserInfo(text)
        let cleaned = String(
            String.UnicodeScalarView(
                text.unicodeScalars.prefix(200).map { $0.value >= 0x20 && $0.value < 0x7F ? $0 : "?" }
            )
        )
        return "\"" + cleaned + "\"" + (text.unicodeScalars.count > 200 ? "…" : "")
    }

    /// `text` with the user-info of its authority (what precedes the last `@` before the path,
    /// query or fragment, after `scheme://` if any) replaced by `<redacted>`: a password in an
    /// endpoint never reaches a message or a log.
    public static func redactingUserInfo(_ text: String) -> String {
        let start = text.firstRange(of: "://")?.upperBound ?? text.startIndex
        let rest = text[start...]
        let end = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        guard let at = rest[..<end].lastIndex(of: "@") else { return text }
        return String(text[..<start]) + "<redacted>" + String(text[at...])
    }
}
