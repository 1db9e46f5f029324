#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Where the metadata endpoint listens (`metadata_server.listen`): a loopback IP literal and a
/// port, `127.0.0.1:8989` or `[::1]:8989`. Names are refused: the endpoint answers only on this
/// host's loopback, and a name could resolve elsewhere.
public struct MetadataListenAddress: Sendable, Hashable, CustomStringConvertible {
    /// The IP literal, without brackets (`127.0.0.1`, `::1`).
    public let host: String
    /// The address in network byte order, 4 or 16 bytes.
    public let addressBytes: [UInt8]
    /// The port (0 only for tests, through ``init(host:port:)``: the system picks one, see
    /// ``withPort(_:)``).
    public let port: UInt16

    /// Parses `ip:port` (`[ipv6]:port` for IPv6), the port from 1 to 65535: what a configuration
    /// gives.
    /// - Throws: ``MetadataConfigurationError`` naming what is wrong.
    public init(parsing text: String) throws(MetadataConfigurationError) {
        let hostText: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw MetadataConfigurationError(key: "listen", "an IPv6 address is written [::1]:port")
            }
            hostText = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else {
                throw MetadataConfigurationError(key: "listen", "needs ip:port, as 127.0.0.1:8989 or [::1]:8989")
            }
            hostText = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard let port = UInt16(portText), port != 0, portText.allSatisfy(\.isASCII), portText.first != "+" else {
            throw MetadataConfigurationError(key: "listen", "the port must be a number from 1 to 65535")
        }
        guard let bytes = Self.addressBytes(of: String(hostText)) else {
            throw MetadataConfigurationError(key: "listen", "\(hostText) is not an IP address (names are not accepted)")
        }
        try self.init(host: String(hostText), addressBytes: bytes, port: port)
    }

    /// The address `host` (an IP literal without brackets) and `port`.
    /// - Throws: ``MetadataConfigurationError`` when `host` is not a loopback IP literal.
    public init(host: String, port: UInt16) throws(MetadataConfigurationError) {
        guard let bytes = Self.addressBytes(of: host) else {
            throw MetadataConfigurationError(key: "listen", "\(host) is not an IP address (names are not accepted)")
        }
        try self.init(host: host, addressBytes: bytes, port: port)
    }

    private init(host: String, addressBytes: [UInt8], port: UInt16) throws(MetadataConfigurationError) {
        let loopback =
            addressBytes.count == 4 ? addressBytes[0] == 127 : addressBytes == [UInt8](repeating: 0, count: 15) + [1]
        guard loopback else {
            throw MetadataConfigurationError(
                key: "listen",
                "\(host) is not a loopback address (127.0.0.0/8 or ::1): the endpoint serves this host only"
            )
        }
        self.host = host
        self.addressBytes = addressBytes
        self.port = port
    }

    /// The same address on `port`: the one the system gave a listener asked for port 0.
    public func withPort(_ port: UInt16) -> MetadataListenAddress {
        // The address was checked already.
        try! MetadataListenAddress(host: host, addressBytes: addressBytes, port: port)
    }

    /// Whether the address is IPv6 (`::1`).
    public var isIPv6: Bool { addressBytes.count == 16 }

    /// `127.0.0.1:8989`, `[::1]:8989`: what a client puts in `GCE_METADATA_HOST`.
    public var description: String { isIPv6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// The bytes of IP literal `text` (4 or 16), `nil` when it is not one.
    static func addressBytes(of text: String) -> [UInt8]? {
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        if inet_pton(AF_INET, text, &ipv4) == 1 { return withUnsafeBytes(of: &ipv4) { Array($0) } }
        if inet_pton(AF_INET6, text, &ipv6) == 1 { return withUnsafeBytes(of: &ipv6) { Array($0) } }
        return nil
    }
}
