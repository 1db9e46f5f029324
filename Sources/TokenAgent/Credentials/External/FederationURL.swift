#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A URL of an `external_account` file (`token_url`, `service_account_impersonation_url`, a
/// credential source's `url`, AWS's `region_url`, `url`, `imdsv2_session_token_url` and
/// `regional_cred_verification_url`), held as its parts: scheme, host, port, path and query.
/// Requests are built from these parts, never from the text as written.
///
/// Each field has its own ``Rule``: whether a query is part of it, whether its path may hold `@`
/// and `:` (the impersonation URL's `serviceAccounts/a@b:generateAccessToken`), whether its host
/// may hold `{region}`, and whether plain `http` may go to the instance-metadata addresses.
/// User-info and fragments are refused everywhere. Plain `http` is allowed to loopback for every
/// field (test doubles, as for `token_uri`), and to `169.254.169.254` and `fd00:ec2::254` where
/// the rule says so; everything else is `https`.
public struct FederationURL: Sendable, Hashable, CustomStringConvertible {
    /// What a field's URL may hold.
    public struct Rule: Sendable, Hashable {
        /// A query is part of the URL (a `url` source, `regional_cred_verification_url`).
        var allowsQuery = false
        /// The path may hold `@` and `:` (the impersonation URL).
        var allowsAccountPath = false
        /// The host may hold `{region}` (`regional_cred_verification_url`).
        var allowsRegionTemplate = false
        /// Plain `http` may go to the instance-metadata addresses.
        var allowsInstanceMetadata = false

        /// `token_url`, `token_info_url`: an endpoint, no query.
        public static let endpoint = Rule()
        /// `service_account_impersonation_url`.
        public static let impersonation = Rule(allowsAccountPath: true)
        /// A `url` credential source: any local token endpoint, a query allowed.
        public static let tokenSource = Rule(allowsQuery: true, allowsInstanceMetadata: true)
        /// AWS's `url`, `region_url` and `imdsv2_session_token_url`.
        public static let instanceMetadata = Rule(allowsInstanceMetadata: true)
        /// AWS's `regional_cred_verification_url`: `{region}` in its host, a query allowed.
        public static let verification = Rule(allowsQuery: true, allowsRegionTemplate: true)
    }

    /// The instance-metadata addresses plain `http` may go to, where a rule allows it (AWS's and
    /// Azure's link-local address, and AWS's IPv6 one).
    public static let instanceMetadataHosts: Set<String> = ["169.254.169.254", "fd00:ec2::254"]

    /// `https` or `http`.
    public let scheme: String
    /// The host: a DNS name or IPv4 address as given (maybe holding `{region}`), or an IPv6
    /// address without its brackets.
    public let host: String
    /// The port, when one was given.
    public let port: Int?
    /// The path, empty or starting with `/`.
    public let path: String
    /// The query without its `?`; `nil` when there is none.
    public let query: String?

    /// Reads `text`, the value of `field` in the credentials file at `file`, by `rule`.
    ///
    /// - Throws: ``ConfigurationError`` with key `credentials`, naming the file and field, the
    ///   text shown with any user-info redacted.
    public init(_ text: String, field: String, file: String, rule: Rule) throws(ConfigurationError) {
        let shown = EndpointSecurity.printable(text)
        func refuse(_ why: String) -> ConfigurationError {
            ConfigurationError(key: "credentials", "credentials file \(file): \(field) \(shown) \(why)")
        }
        guard text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) else {
            throw refuse("holds a space, a control character, a backslash or non-ASCII text")
        }
        guard let separator = text.firstRange(of: "://") else { throw refuse("is not an absolute URL with a host") }
        let scheme = text[..<separator.lowerBound].lowercased()
        let rest = text[separator.upperBound...]
        let authorityEnd = rest.firstIndex(where: { "/?#".contains($0) }) ?? rest.endIndex
        var authority = String(rest[..<authorityEnd])
        let afterAuthority = rest[authorityEnd...]
        if authority.contains("@") { throw refuse("carries user-info (put no secrets in URLs)") }
        if afterAuthority.contains("#") { throw refuse("carries a fragment (#)") }
        let pathEnd = afterAuthority.firstIndex(of: "?") ?? afterAuthority.endIndex
        let path = String(afterAuthority[..<pathEnd])
        let query =
            pathEnd < afterAuthority.endIndex ? String(afterAuthority[afterAuthority.index(after: pathEnd)...]) : nil
        if query != nil, !rule.allowsQuery { throw refuse("carries a query (?), which this field may not") }
        // `{region}` is checked as a name of its own, then put back.
        let template = "{region}"
        let placeholder = "region-placeholder-0"
        let hasTemplate = authority.contains(template)
        if hasTemplate {
            guard rule.allowsRegionTemplate, !authority.contains(placeholder) else {
                throw refuse("holds {region}, which only regional_cred_verification_url may")
            }
            authority = authority.replacing(template, with: placeholder)
        }
        guard let parts = ServiceEndpoint.hostAndPort(Substring(authority)) else {
            throw refuse("is not an absolute URL with a host (and port 1 to 65535)")
        }
        guard ServiceEndpoint.isPath(Substring(path), also: rule.allowsAccountPath ? "@:" : "") else {
            throw refuse(
                "has a path of other than A-Z a-z 0-9 - . _ ~ /\(rule.allowsAccountPath ? " @ :" : "") and %XX escapes"
            )
        }
        let host = hasTemplate ? parts.host.replacing(placeholder, with: template) : parts.host
        switch scheme {
        case "https":
            break
        case "http":
            let bare = parts.host.lowercased()
            if EndpointSecurity.isLoopback(host: bare) { break }
            if rule.allowsInstanceMetadata, Self.instanceMetadataHosts.contains(bare) { break }
            let allowed = rule.allowsInstanceMetadata ? "loopback or 169.254.169.254 and fd00:ec2::254" : "loopback"
            throw refuse(
                "would go in the clear over plain http: use https (plain http is accepted only to \(allowed))"
            )
        default:
            throw refuse("has scheme \(EndpointSecurity.printable(String(scheme))), not https")
        }
        self.scheme = scheme
        self.host = host
        self.port = parts.port
        self.path = path
        self.query = query
    }

    /// The host with `{region}` filled in.
    public func host(region: String) -> String { host.replacing("{region}", with: region) }

    /// The whole URL, `{region}` filled in when given.
    public func url(region: String? = nil) -> String {
        let name = region.map { host(region: $0) } ?? host
        let bracketed = name.contains(":") ? "[" + name + "]" : name
        let portText = port.map { ":\($0)" } ?? ""
        return scheme + "://" + bracketed + portText + path + (query.map { "?" + $0 } ?? "")
    }

    /// The URL with `suffix` appended to its path (AWS's `url/<role>`).
    func appendingPath(_ suffix: String) -> String {
        let bracketed = host.contains(":") ? "[" + host + "]" : host
        let portText = port.map { ":\($0)" } ?? ""
        let base = path.hasSuffix("/") ? path : path + "/"
        return scheme + "://" + bracketed + portText + base + suffix + (query.map { "?" + $0 } ?? "")
    }

    /// The URL without its query: for messages (a query may name a resource, never a secret, but
    /// it is long).
    public var description: String {
        let bracketed = host.contains(":") ? "[" + host + "]" : host
        return scheme + "://" + bracketed + (port.map { ":\($0)" } ?? "") + path
    }
}
