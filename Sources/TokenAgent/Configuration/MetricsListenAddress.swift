/// Where the optional HTTP metrics listener listens: `metrics_listen` / `--metrics-listen`.
///
/// Written `HOST:PORT` (`127.0.0.1:9464`), `[IPv6]:PORT` (`[::1]:9464`), or just `PORT` or
/// `:PORT`, which mean the loopback address `127.0.0.1`. The host is an IP address literal or
/// `localhost`; names are not resolved, so what is bound is exactly what is written.
public struct MetricsListenAddress: Sendable, Hashable, CustomStringConvertible {
    /// The address to bind: an IPv4 or IPv6 literal.
    public var host: String
    /// The TCP port, 1 to 65535.
    public var port: Int

    /// Reads `text`; throws ``ConfigurationError`` under the key `metrics_listen`.
    public init(parsing text: String) throws {
        func bad() -> ConfigurationError {
            ConfigurationError(
                key: "metrics_listen",
                "must be HOST:PORT with an IP address or localhost (e.g. 127.0.0.1:9464), or a port"
            )
        }
        var host = "127.0.0.1"
        var portText = Substring(text)
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else {
                throw bad()
            }
            host = String(text[text.index(after: text.startIndex)..<close])
            portText = text[text.index(close, offsetBy: 2)...]
            guard host.contains(":"), host.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { throw bad() }
        } else if let colon = text.lastIndex(of: ":") {
            let hostText = text[..<colon]
            portText = text[text.index(after: colon)...]
            if !hostText.isEmpty {
                if hostText == "localhost" {
                    host = "127.0.0.1"
                } else {
                    let parts = hostText.split(separator: ".", omittingEmptySubsequences: false)
                    guard parts.count == 4, parts.allSatisfy({ Int($0).map { (0...255).contains($0) } ?? false })
                    else { throw bad() }
                    host = String(hostText)
                }
            }
        }
        guard !portText.isEmpty, portText.allSatisfy(\.isASCII), portText.count <= 5, let port = Int(portText),
            (1...65535).contains(port)
        else { throw bad() }
        self.host = host
        self.port = port
    }

    /// Whether only this host can reach it: `127.0.0.0/8` or `::1`.
    public var isLoopback: Bool { host.hasPrefix("127.") || host == "::1" }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
