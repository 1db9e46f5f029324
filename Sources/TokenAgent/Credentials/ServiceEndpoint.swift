#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An endpoint that carries secrets (`iam_endpoint`, a credentials file's `token_uri`, the
/// metadata host), held as its parts: a scheme, a host, a port and an optional path prefix, and
/// nothing else. Request URLs are built from these parts (``url(_:)``), so no query, fragment or
/// user-info in the configured text can move a Bearer-carrying request elsewhere or make it carry
/// more than it should (`https://iam.example/?x=` would send the account in the query).
///
/// The text is read by hand, not by a lenient URL parser: printable ASCII without spaces or `\`;
/// `http` or `https` (see ``EndpointSecurity``), `://`, a host (a DNS name, an IPv4 address or a
/// bracketed IPv6 one), an optional `:port` (1 to 65535), and an optional path of
/// `A-Z a-z 0-9 - . _ ~ /` and `%XX` escapes. Anything else (`?`, `#`, `@`, `;`, ...) is refused
/// with the key's name, the text shown with any user-info redacted.
public struct ServiceEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// `https` or `http`.
    public let scheme: String
    /// The host: a DNS name or IPv4 address as given, or an IPv6 address without its brackets.
    public let host: String
    /// The port, when one was given.
    public let port: Int?
    /// The path as given: empty, or starting with `/`. The whole path of a `token_uri`; the prefix
    /// of the API's paths for `iam_endpoint`.
    public let pathPrefix: String

    /// Google's IAM Credentials API.
    public static let iamCredentials = ServiceEndpoint(scheme: "https", host: "iamcredentials.googleapis.com")

    /// Reads `text`, refusing what is not an endpoint or may not carry secrets.
    ///
    /// - Parameters:
    ///   - text: The endpoint as configured.
    ///   - key: The configuration key (or file and field) that named it, for the error.
    ///   - allowingMetadataServer: Whether plain `http` to the metadata server is accepted.
    /// - Throws: ``ConfigurationError`` naming `key` and saying why.
    public init(_ text: String, key: String, allowingMetadataServer: Bool = false) throws(ConfigurationError) {
        let shown = EndpointSecurity.printable(text)
        func refuse(_ why: String) -> ConfigurationError {
            ConfigurationError(key: key, "\(shown) \(why); give only scheme, host, port and a path prefix")
        }
        guard text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) else {
            throw refuse("holds a space, a control character, a backslash or non-ASCII text")
        }
        guard let separator = text.firstRange(of: "://") else {
            throw ConfigurationError(key: key, "\(shown) is not an absolute URL with a host")
        }
        let scheme = text[..<separator.lowerBound].lowercased()
        let rest = text[separator.upperBound...]
        let authorityEnd = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        let authority = rest[..<authorityEnd]
        let path = rest[authorityEnd...]
        if authority.contains("@") { throw refuse("carries user-info (put no secrets in URLs)") }
        if path.contains("?") { throw refuse("carries a query (?)") }
        if path.contains("#") { throw refuse("carries a fragment (#)") }
        guard let hostAndPort = Self.hostAndPort(authority) else {
            throw ConfigurationError(key: key, "\(shown) is not an absolute URL with a host (and port 1 to 65535)")
        }
        guard Self.isPath(path) else {
            throw refuse("has a path of other than A-Z a-z 0-9 - . _ ~ / and %XX escapes")
        }
        try EndpointSecurity.checkTransport(
            scheme: scheme,
            host: hostAndPort.host,
            text: text,
            key: key,
            allowingMetadataServer: allowingMetadataServer
        )
        self.init(scheme: scheme, host: hostAndPort.host, port: hostAndPort.port, pathPrefix: String(path))
    }

    init(scheme: String, host: String, port: Int? = nil, pathPrefix: String = "") {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathPrefix = pathPrefix
    }

    /// The URL of `path` (starting with `/`, built by the agent) under the prefix, its trailing
    /// `/` dropped; with no `path`, the endpoint's own URL.
    public func url(_ path: String = "") -> String {
        let bracketed = host.contains(":") ? "[" + host + "]" : host
        let portText = port.map { ":\($0)" } ?? ""
        var prefix = pathPrefix
        if !path.isEmpty {
            while prefix.hasSuffix("/") { prefix.removeLast() }
        }
        let full = prefix + path
        return scheme + "://" + bracketed + portText + (full.isEmpty ? "/" : full)
    }

    public var description: String { url() }

    /// The host and port of `authority`: `name`, `1.2.3.4` or `[v6]`, then `:port` if any.
    static func hostAndPort(_ authority: Substring) -> (host: String, port: Int?)? {
        let host: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            guard after.isEmpty || after.hasPrefix(":") else { return nil }
            portText = after.isEmpty ? nil : after.dropFirst()
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(host), &address) == 1 else { return nil }
        } else {
            let pieces = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard pieces.count <= 2 else { return nil }
            host = pieces[0]
            portText = pieces.count == 2 ? pieces[1] : nil
            let isName = host.utf8.allSatisfy { byte in
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                    || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
            }
            guard isName, !host.hasPrefix("."), !host.contains("..") else { return nil }
        }
        guard !host.isEmpty else { return nil }
        guard let portText else { return (String(host), nil) }
        guard (1...5).contains(portText.count), portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let port = Int(portText), (1...65535).contains(port)
        else { return nil }
        return (String(host), port)
    }

    /// Whether `path` is empty or `/` then unreserved characters, `/`, `%XX` escapes and the bytes
    /// of `also` (the impersonation URL's `@` and `:`).
    static func isPath(_ path: Substring, also: String = "") -> Bool {
        guard !path.isEmpty else { return true }
        let bytes = Array(path.utf8)
        guard bytes[0] == UInt8(ascii: "/") else { return false }
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, isHex(bytes[index + 1]), isHex(bytes[index + 2]) else { return false }
                index += 3
                continue
            }
            let plain =
                (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39)
                || "-._~/".utf8.contains(byte) || also.utf8.contains(byte)
            guard plain else { return false }
            index += 1
        }
        return true
    }

    static func isHex(_ byte: UInt8) -> Bool {
        (byte >= 0x30 && byte <= 0x39) || (byte >= 0x61 && byte <= 0x66) || (byte >= 0x41 && byte <= 0x46)
    }
}
