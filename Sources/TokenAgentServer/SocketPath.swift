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

    /// Gives the socket the agent just bound at `path` its `mode` and, when given, its `group`,
    /// never following a symbolic link: `path` must be a socket owned by `uid` (the socket the
    /// agent bound), else nothing is changed and a ``Problem`` is thrown. The mode is set at
    /// creation by the umask around `bind`; it is set again (`fchmodat` with
    /// `AT_SYMLINK_NOFOLLOW`) only when it differs, and the group with `fchownat` and
    /// `AT_SYMLINK_NOFOLLOW`.
    ///
    /// - Returns: why the group could not be set (the agent is neither root nor a member of it),
    ///   or `nil` when it was set or none was asked for.
    static func setModeAndGroup(
        of path: String,
        mode: mode_t,
        group: gid_t?,
        uid: uid_t = geteuid()
    ) throws -> String? {
        let info = try checkBoundSocket(path, uid: uid)
        if info.st_mode & 0o7777 != mode, fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW) != 0 {
            throw Problem(description: "cannot set the mode of socket \(path): \(errorText())")
        }
        guard let group, info.st_gid != group else { return nil }
        return fchownat(AT_FDCWD, path, uid_t.max, group, AT_SYMLINK_NOFOLLOW) == 0 ? nil : errorText()
    }

    /// The `lstat` of `path` when it is a socket owned by `uid`, the one the agent bound; else a
    /// ``Problem`` saying what is there instead.
    static func checkBoundSocket(_ path: String, uid: uid_t) throws -> stat {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw Problem(description: "socket \(path) is gone after binding: \(errorText())")
        }
        let kind: String
        switch info.st_mode & S_IFMT {
        case S_IFSOCK:
            guard info.st_uid != uid else { return info }
            kind = "a socket owned by uid \(info.st_uid)"
        case S_IFLNK: kind = "a symbolic link"
        case S_IFREG: kind = "a regular file"
        case S_IFDIR: kind = "a directory"
        default: kind = "a file of another type"
        }
        throw Problem(
            description: "\(path) is \(kind), not the socket the agent bound; refusing to set its mode or group"
        )
    }

    /// Whether a process accepts connections on the socket at `path`.
    static func isListening(_ path: String) -> Bool {
        let fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else { return false }
        close(fd)
        return true
    }

    private static func errorText() -> String {
        String(cString: strerror(errno))
    }
}
