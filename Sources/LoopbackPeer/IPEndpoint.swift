#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// One end of a TCP connection: an IPv4 or IPv6 address and a port.
public struct IPEndpoint: Sendable, Hashable, CustomStringConvertible {
    /// The address family of an endpoint.
    public enum Family: Sendable, Hashable {
        /// 4-byte addresses.
        case ipv4
        /// 16-byte addresses.
        case ipv6
    }

    /// The address in network byte order: 4 bytes for IPv4, 16 for IPv6.
    public let addressBytes: [UInt8]
    /// The port, in host byte order.
    public let port: UInt16

    /// The endpoint's family, from the length of its address.
    public var family: Family { addressBytes.count == 4 ? .ipv4 : .ipv6 }

    /// An endpoint from an IP literal (`127.0.0.1`, `::1`; no brackets, no zone) and a port;
    /// `nil` when `host` is not one.
    public init?(host: String, port: UInt16) {
        var ipv4 = in_addr()
        var ipv6 = in6_addr()
        if inet_pton(AF_INET, host, &ipv4) == 1 {
            addressBytes = withUnsafeBytes(of: &ipv4) { Array($0) }
        } else if inet_pton(AF_INET6, host, &ipv6) == 1 {
            addressBytes = withUnsafeBytes(of: &ipv6) { Array($0) }
        } else {
            return nil
        }
        self.port = port
    }

    /// An endpoint from raw address bytes (4 or 16 of them, network byte order) and a port;
    /// `nil` for any other length.
    public init?(addressBytes: [UInt8], port: UInt16) {
        guard addressBytes.count == 4 || addressBytes.count == 16 else { return nil }
        self.addressBytes = addressBytes
        self.port = port
    }

    /// The address as text (`127.0.0.1`, `::1`).
    public var host: String {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        let family = addressBytes.count == 4 ? AF_INET : AF_INET6
        let written = addressBytes.withUnsafeBytes { bytes in
            inet_ntop(family, bytes.baseAddress, &text, socklen_t(text.count))
        }
        guard written != nil else { return "?" }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// `127.0.0.1:8989`, `[::1]:8989`.
    public var description: String { family == .ipv4 ? "\(host):\(port)" : "[\(host)]:\(port)" }
}
