import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One blocking request-reply exchange over a Unix stream socket.
enum UnixLineExchange {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Connects to `path`, writes `request` and an LF, and returns the first reply line.
    static func exchange(_ request: String, path: String, timeoutSeconds: Int = 15) throws -> String {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let pathBytes = Array(path.utf8)
        guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw Failure(description: "socket path too long")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: pathBytes)
            raw[pathBytes.count] = 0
        }
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard connected == 0 else { throw Failure(description: String(cString: strerror(errno))) }
        let bytes = Array((request + "\n").utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { throw Failure(description: "write: \(String(cString: strerror(errno)))") }
            sent += n
        }
        var reply: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !reply.contains(UInt8(ascii: "\n")) {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else {
                throw Failure(description: n == 0 ? "connection closed" : String(cString: strerror(errno)))
            }
            reply.append(contentsOf: chunk[0..<n])
        }
        let line = reply[..<reply.firstIndex(of: UInt8(ascii: "\n"))!]
        return String(decoding: line, as: UTF8.self)
    }
}
