#if canImport(Glibc)
    import Glibc
#endif

/// The address of a Unix-domain socket at a filesystem path, and a stream connection to it:
/// the one place the agent, the client and the tests build a `sockaddr_un`.
public enum UnixSocketAddress {
    /// Calls `body` with the `sockaddr_un` of `path` and its length; `nil` when the path does not
    /// fit (107 bytes at most).
    public static func with<R>(path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> R) rethrows -> R? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return try withUnsafePointer(to: &address) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                try body($0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
    }

    /// Opens a stream socket connected to `path`: the descriptor, or `-errno` on failure. With
    /// `timeout` (seconds), the socket's send time-out (`SO_SNDTIMEO`) is set before connecting:
    /// on a Unix socket it bounds `connect` too, which otherwise waits for as long as the
    /// listener's queue is full (`-EAGAIN` once it runs out).
    public static func connectStream(to path: String, timeout: Double? = nil) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -errno }
        if let timeout {
            let seconds = timeout.isFinite ? min(max(timeout, 0.001), 86_400) : 86_400
            var interval = timeval(
                tv_sec: Int(seconds),
                tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000)
            )
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &interval, socklen_t(MemoryLayout<timeval>.size))
        }
        let result = with(path: path) { connect(fd, $0, $1) == 0 ? 0 : errno } ?? ENAMETOOLONG
        guard result == 0 else {
            close(fd)
            return -result
        }
        return fd
    }
}
