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

    /// Opens a stream socket connected to `path`: the descriptor, or `-errno` on failure.
    public static func connectStream(to path: String) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return -errno }
        let result = with(path: path) { connect(fd, $0, $1) == 0 ? 0 : errno } ?? ENAMETOOLONG
        guard result == 0 else {
            close(fd)
            return -result
        }
        return fd
    }
}
