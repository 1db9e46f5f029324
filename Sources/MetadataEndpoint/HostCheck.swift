/// Whether a request's `Host` (or an absolute-form target's authority) names this endpoint: the
/// listen address's IP, `localhost` or `metadata.google.internal` (names in any case, with or
/// without a final dot), with no port or the listen port. Anything else (a name a DNS rebinding
/// attack would send, `evil.example:8989`) is refused.
struct HostCheck: Sendable {
    /// The address listened on.
    let listen: MetadataListenAddress

    /// The names accepted besides the listen IP.
    static let names: Set<String> = ["localhost", "metadata.google.internal"]

    /// Whether `authority` (`host[:port]`, `[ipv6][:port]`) names this endpoint.
    func accepts(_ authority: some StringProtocol) -> Bool {
        let host: Substring
        var port: Substring?
        let text = Substring(authority)
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return false }
            host = text[text.index(after: text.startIndex)..<close]
            let after = text[text.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return false }
                port = after.dropFirst()
            }
            guard MetadataListenAddress.addressBytes(of: String(host))?.count == 16 else { return false }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        } else {
            host = text
        }
        if let port {
            guard !port.isEmpty, port.count <= 5, port.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                UInt16(port) == listen.port
            else { return false }
        }
        if let bytes = MetadataListenAddress.addressBytes(of: String(host)) {
            // An IPv6 literal needs its brackets; an IPv4 one must not have them.
            return bytes == listen.addressBytes && (bytes.count == 16) == text.hasPrefix("[")
        }
        var name = host.lowercased()
        if name.hasSuffix(".") { name.removeLast() }
        return Self.names.contains(name)
    }
}
