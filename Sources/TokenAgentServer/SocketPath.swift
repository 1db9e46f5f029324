import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Prepares a filesystem path for a listening Unix socket.
enum SocketPath {
    /// Why a socket path cannot be used.
    struct Problem: Error, CustomStringConvertible {
        var description: String
    }

    /// Creates the parent directory, refuses a path that is not a socket or that another process
    /// listens on, and removes a stale socket file.
    static func prepare(_ path: String) throws {
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty {
            do {
                try FileManager.default.createDirectory(
                    atPath: parent,
                    withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o755]
                )
            } catch {
                throw Problem(description: "cannot create directory \(parent)")
            }
        }
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw Problem(description: "\(path) exists and is not a socket; refusing to replace it")
        }
        if isListening(path) {
            throw Problem(description: "another process is listening on \(path)")
        }
        guard unlink(path) == 0 else {
            throw Problem(description: "cannot remove stale socket \(path)")
        }
    }

    /// Whether a process accepts connections on the socket at `path`.
    static func isListening(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        return result == 0
    }
}
