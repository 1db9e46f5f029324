#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A plain blocking TCP socket for tests: a listener, a client, or an accepted connection.
public final class LoopbackSocket: Sendable {
    /// The descriptor.
    public let fd: Int32

    private init(fd: Int32) { self.fd = fd }

    deinit { close(fd) }

    /// A listener bound to `host` (an IP literal) on an ephemeral port.
    public static func listener(host: String) throws -> LoopbackSocket {
        let family = host.contains(":") ? AF_INET6 : AF_INET
        let socket = try LoopbackSocket(
            fd: check(Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0), "socket")
        )
        try withAddress(host: host, port: 0) { address, length in
            _ = try check(bind(socket.fd, address, length), "bind")
        }
        _ = try check(listen(socket.fd, 16), "listen")
        return socket
    }

    /// A client of `family` (`AF_INET` or `AF_INET6`) connected to `host`:`port`.
    public static func connect(to host: String, port: UInt16, family: Int32? = nil) throws -> LoopbackSocket {
        let family = family ?? (host.contains(":") ? AF_INET6 : AF_INET)
        let socket = try LoopbackSocket(
            fd: check(Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0), "socket")
        )
        try withAddress(host: host, port: port) { address, length in
            _ = try check(Glibc.connect(socket.fd, address, length), "connect")
        }
        return socket
    }

    /// Accepts one connection, waiting at most `timeout` seconds; blocking: call it on a thread of
    /// its own.
    public func accept(timeout: Double = hangLimit) throws -> LoopbackSocket {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&poller, 1, Int32(timeout * 1000))
        guard ready == 1 else {
            throw SubprocessError.system(call: "poll (accept)", errno: ready == 0 ? ETIMEDOUT : errno)
        }
        return LoopbackSocket(fd: try check(Glibc.accept(fd, nil, nil), "accept"))
    }

    /// Sends all of `bytes`; false when the peer is gone.
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes {
                Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL))
            }
            if sent < 0 && errno == EINTR { continue }
            guard sent > 0 else { return false }
            offset += sent
        }
        return true
    }

    /// Reads until the peer closes (or resets) the connection or `timeout` seconds pass: what
    /// came, and whether the connection ended. Blocking: call it on a thread of its own.
    public func readUntilClosed(timeout: Double) -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        var remaining = timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        while remaining > 0 {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, 50)
            remaining -= 0.05
            if ready < 0 && errno == EINTR { continue }
            if ready <= 0 { continue }
            let count = recv(fd, &buffer, buffer.count, 0)
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { return (bytes, true) }
            bytes += buffer[..<count]
        }
        return (bytes, false)
    }

    /// Shuts the sending side down (`shutdown(SHUT_WR)`): the peer reads the end of the stream.
    public func shutdownWrite() { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Reads until what came satisfies `done`, the peer closes, or `timeout` seconds pass (a hang
    /// detector: the read ends as soon as `done` holds). Blocking: call it off the pool.
    public func read(until done: ([UInt8]) -> Bool, timeout: Double = hangLimit) -> (bytes: [UInt8], closed: Bool) {
        var bytes: [UInt8] = []
        var waited = 0.0
        while waited < timeout, !done(bytes) {
            let part = readUntilClosed(timeout: 0.1)
            bytes += part.bytes
            if part.closed { return (bytes, true) }
            waited += 0.1
        }
        return (bytes, false)
    }

    /// The local address: (IP literal, port).
    public func localAddress() throws -> (host: String, port: UInt16) {
        try address { getsockname(fd, $0, $1) }
    }

    /// The remote address: (IP literal, port).
    public func remoteAddress() throws -> (host: String, port: UInt16) {
        try address { getpeername(fd, $0, $1) }
    }

    private func address(
        _ call: (UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) throws -> (host: String, port: UInt16) {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let result = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { call($0, &length) }
        }
        _ = try check(result, "getsockname/getpeername")
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        if storage.ss_family == sa_family_t(AF_INET) {
            return try withUnsafePointer(to: &storage) {
                try $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var raw = address.pointee.sin_addr
                    guard inet_ntop(AF_INET, &raw, &text, socklen_t(text.count)) != nil else {
                        throw SubprocessError.system(call: "inet_ntop", errno: errno)
                    }
                    return (text.nulTerminatedString, UInt16(bigEndian: address.pointee.sin_port))
                }
            }
        }
        return try withUnsafePointer(to: &storage) {
            try $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                var raw = address.pointee.sin6_addr
                guard inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count)) != nil else {
                    throw SubprocessError.system(call: "inet_ntop", errno: errno)
                }
                return (text.nulTerminatedString, UInt16(bigEndian: address.pointee.sin6_port))
            }
        }
    }

    private static func withAddress(
        host: String,
        port: UInt16,
        _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> Void
    ) throws {
        if host.contains(":") {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = port.bigEndian
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else {
                throw SubprocessError.system(call: "inet_pton \(host)", errno: EINVAL)
            }
            try withUnsafePointer(to: &address) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    try body($0, socklen_t(MemoryLayout<sockaddr_in6>.size))
                }
            }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else {
                throw SubprocessError.system(call: "inet_pton \(host)", errno: EINVAL)
            }
            try withUnsafePointer(to: &address) {
                try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    try body($0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
        }
    }
}

@discardableResult
private func check(_ result: Int32, _ call: String) throws -> Int32 {
    guard result >= 0 else { throw SubprocessError.system(call: call, errno: errno) }
    return result
}

extension [CChar] {
    /// The UTF-8 text before the first NUL.
    var nulTerminatedString: String {
        String(decoding: prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
