import Foundation
import TokenWire

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
        let fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }
}
