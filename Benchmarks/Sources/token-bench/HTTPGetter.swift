import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking HTTP/1.1 client of one path on an IPv4 loopback port, as a worker's requests session
/// (urllib3) uses a metadata server: with `keepAlive`, one connection (`TCP_NODELAY`) kept for
/// every GET and opened again when the server closes it (its `Connection: close`, or a close
/// while idle); without, a new connection for each GET, sent with `Connection: close`.
final class HTTPGetter {
    private let address: sockaddr_in
    private let keepAlive: Bool
    private let request: [UInt8]
    private var fd: Int32 = -1
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)
    /// Connections opened so far.
    private(set) var connections = 0

    /// GETs `path` from `host:port` (`host` an IPv4 literal) with `Metadata-Flavor: Google`.
    init(host: String, port: Int, path: String, keepAlive: Bool) throws {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw BenchError("not an IPv4 address: \(host)") }
        self.address = address
        self.keepAlive = keepAlive
        request = Array(
            ("GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nUser-Agent: token-bench\r\nAccept: */*\r\n"
                + "Connection: \(keepAlive ? "keep-alive" : "close")\r\nMetadata-Flavor: Google\r\n\r\n").utf8
        )
    }

    deinit { if fd >= 0 { close(fd) } }

    /// The body of a 200 answer to one GET.
    func get() throws -> [UInt8] {
        let reused = fd >= 0
        if !reused { try connect() }
        do {
            return try exchange()
        } catch let error as Closed where reused && error.before {
            // The server closed the kept connection before this request was answered: once more,
            // on a new one (as urllib3 retries a request on a dropped idle connection).
            try connect()
            return try exchange()
        }
    }

    /// The connection closed, `before` any byte of the answer came.
    private struct Closed: Error { var before: Bool }

    private func connect() throws {
        if fd >= 0 { close(fd) }
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchError("socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        var target = address
        let result = withUnsafePointer(to: &target) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else { throw BenchError("connect: \(String(cString: strerror(errno)))") }
        connections += 1
    }

    private func exchange() throws -> [UInt8] {
        let written = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == request.count else { throw Closed(before: true) }
        var filled = 0
        var headEnd: Int?
        var bodyLength = 0
        var closes = !keepAlive
        while headEnd == nil || filled < headEnd! + bodyLength {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            guard count > 0 else {
                close(fd)
                fd = -1
                throw Closed(before: filled == 0)
            }
            filled += count
            guard headEnd == nil, let end = headEndIndex(in: filled) else { continue }
            headEnd = end
            let head = String(decoding: buffer[0..<end], as: UTF8.self).lowercased()
            guard head.hasPrefix("http/1.1 200 ") else {
                throw BenchError("answer: \(head.prefix { $0 != "\r" })")
            }
            for line in head.split(separator: "\r\n") {
                if line.hasPrefix("content-length:") {
                    bodyLength = Int(line.dropFirst(15).trimmingCharacters(in: .whitespaces)) ?? 0
                }
                if line.hasPrefix("connection:"), line.contains("close") { closes = true }
            }
            guard end + bodyLength <= buffer.count else { throw BenchError("answer too long") }
        }
        let body = Array(buffer[headEnd!..<headEnd! + bodyLength])
        if closes {
            close(fd)
            fd = -1
        }
        return body
    }

    /// The index just past the head's blank line, once the first `filled` bytes hold it.
    private func headEndIndex(in filled: Int) -> Int? {
        guard filled >= 4 else { return nil }
        for index in 3..<filled
        where buffer[index] == 10 && buffer[index - 1] == 13 && buffer[index - 2] == 10 && buffer[index - 3] == 13 {
            return index + 1
        }
        return nil
    }
}
