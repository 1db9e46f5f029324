import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Prepares a filesystem path for a listening Unix socket.
///
/// The socket's directory, and every directory above it, must be safe from other users (as
/// OpenSSH checks its files): owned by root or the agent's own uid, and not writable by group or
/// others. A directory above the socket's own may be writable by others when it has the sticky bit
/// (as `/tmp`), since then no one else can rename or remove what the agent's uid or root owns in it.
/// A symbolic link on the way must be owned by root or the agent's uid too.
enum SocketPath {
    /// Why a socket path cannot be used.
    struct Problem: Error, CustomStringConvertible {
        var description: String
    }

    /// The mode of a directory the agent creates for its socket.
    static let directoryMode: mode_t = 0o755

    /// What a checked directory is for: its name in messages, and the mode of a directory the
    /// agent creates on the way to it. The socket's directory and the cache file's follow the
    /// same rules.
    struct DirectoryRole: Sendable {
        /// How messages name the directory (`socket directory`).
        var name: String
        /// The mode of a directory the agent creates for it.
        var mode: mode_t

        /// The socket's directory: created 0755, so that workers can reach the socket.
        static let socket = DirectoryRole(name: "socket directory", mode: SocketPath.directoryMode)
        /// The cache file's directory: created 0700, for the agent alone.
        static let cacheFile = DirectoryRole(name: "cache file directory", mode: 0o700)
    }

    /// The most symbolic links followed in a socket directory's path, as the kernel's `ELOOP`.
    static let maxSymbolicLinks = 40

    /// Checks the socket's directory (creating it and any missing directory above it, mode 0755,
    /// owned by the agent), refuses a path that is not a socket or that another process listens
    /// on, and removes a stale socket file.
    static func prepare(_ path: String, uid: uid_t = geteuid()) throws {
        try secureDirectory(directory(of: path), uid: uid)
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw Problem(description: "\(path) exists and is not a socket; refusing to replace it")
        }
        switch probe(path) {
        case .listening:
            throw Problem(description: "another process is listening on \(path)")
        case .stale:
            break
        case .unknown(let error):
            // Not known to be stale: another user's agent may serve on it (EACCES), and
            // replacing it would take its workers' socket.
            throw Problem(
                description:
                    "\(path) may be in use: connecting to it failed with \(errorName(error)), so this agent "
                    + "(uid \(uid)) cannot tell whether another agent serves on it; it belongs to "
                    + "\(ownerDescription(info)), mode \(String(info.st_mode & 0o7777, radix: 8)). "
                    + "Stop the agent that owns it, or give this one a socket of its own (--socket, or \"socket\" in the config)"
            )
        }
        guard unlink(path) == 0 else {
            throw Problem(description: "cannot remove stale socket \(path): \(errorName(errno))")
        }
    }

    /// What connecting to an existing socket file said.
    enum Probe: Equatable {
        /// A process accepted the connection.
        case listening
        /// Nobody listens (`ECONNREFUSED`): a socket left by a process that ended.
        case stale
        /// The connection failed otherwise (`EACCES`: a socket others may not use): whether
        /// anybody listens is not known.
        case unknown(errno: Int32)
    }

    /// Connects to the socket at `path` to learn whether a process listens on it.
    static func probe(_ path: String) -> Probe {
        let fd = UnixSocketAddress.connectStream(to: path)
        if fd >= 0 {
            close(fd)
            return .listening
        }
        return -fd == ECONNREFUSED ? .stale : .unknown(errno: -fd)
    }

    /// `Permission denied (EACCES)`: the system's text and the errno's name.
    static func errorName(_ error: Int32) -> String {
        let names: [Int32: String] = [
            EACCES: "EACCES", EPERM: "EPERM", ENOENT: "ENOENT", ECONNREFUSED: "ECONNREFUSED",
            ENOTSOCK: "ENOTSOCK", EROFS: "EROFS", EBUSY: "EBUSY", ETIMEDOUT: "ETIMEDOUT", EAGAIN: "EAGAIN",
        ]
        return "\(String(cString: strerror(error))) (\(names[error] ?? "errno \(error)"))"
    }

    /// `uid 1001 (alice)`, or `uid 1001` when the user database has no name for it.
    private static func ownerDescription(_ info: stat) -> String {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(info.st_uid, &entry, &buffer, buffer.count, &result) == 0, result != nil,
            let name = entry.pw_name
        else { return "uid \(info.st_uid)" }
        return "uid \(info.st_uid) (\(String(cString: name)))"
    }

    /// The directory the socket at `path` goes in: its parent, or `.` for a bare name. Repeated
    /// slashes count as one and a trailing one is ignored (`/run//a/s/` goes in `/run/a`); the
    /// parent of `/` is `/`.
    static func directory(of path: String) -> String {
        let absolute = path.hasPrefix("/")
        var components = path.split(separator: "/")
        guard !components.isEmpty else { return absolute ? "/" : "." }
        components.removeLast()
        guard !components.isEmpty else { return absolute ? "/" : "." }
        return (absolute ? "/" : "") + components.joined(separator: "/")
    }

    /// Walks `directory` from `/` one component at a time, as the kernel resolves it, and refuses
    /// it unless every directory on the way is safe and the directory it ends at is not writable
    /// by group or others (``checkSocketDirectoryMode(_:_:of:)``): ``resolveSafely(_:uid:naming:label:)``.
    static func secureDirectory(_ directory: String, uid: uid_t = geteuid(), role: DirectoryRole = .socket) throws {
        let final = try resolveSafely(directory, uid: uid, naming: directory, label: role.name, creatingWith: role.mode)
        try checkSocketDirectoryMode(
            try status(of: final, socketDirectory: directory, label: role.name),
            final,
            of: directory,
            label: role.name
        )
    }

    /// Walks `directory` from `/` one component at a time, as the kernel resolves it, and refuses
    /// it unless every directory on the way, itself included, is safe (``checkOwner(_:_:of:uid:label:)``,
    /// ``checkAncestorMode(_:_:of:label:)``). A missing directory is created
    /// (``createDirectory(_:socketDirectory:label:)``) once the one it goes in has been checked. A
    /// symbolic link must be owned by root or `uid`; its target is walked the same way.
    ///
    /// - Parameters:
    ///   - subject: the directory a refusal names (`directory` itself, or one below it that is
    ///     being checked through its parent), after `label` ("socket directory").
    ///   - mode: the mode of a directory created on the way.
    /// - Returns: the directory's path with every symbolic link resolved.
    static func resolveSafely(
        _ directory: String,
        uid: uid_t,
        naming subject: String,
        label: String = "socket directory",
        creatingWith mode: mode_t = directoryMode,
        rules: Rules = .agent
    ) throws -> String {
        try walk(directory, uid: uid, naming: subject, label: label, creatingWith: mode, rules: rules).resolved
    }

    /// Where a walk of a directory's path ended.
    struct Walk: Sendable, Equatable {
        /// The deepest directory that exists on the way, every symbolic link resolved: the
        /// directory itself unless ``missing`` is set.
        var resolved: String
        /// The first directory on the way that does not exist, when the walk creates none.
        var missing: String?
        /// Where the directory is, by device and inode.
        var location = Location(identities: [], remaining: [])
    }

    /// Checks `directory` as ``secureDirectory(_:uid:role:)`` does, creating nothing: every
    /// directory on the way that exists is checked, and the walk stops at the first missing one
    /// (which the agent would create, mode `role.mode`); the directory's own mode is checked when
    /// it exists.
    static func inspectDirectory(_ directory: String, uid: uid_t = geteuid(), role: DirectoryRole = .socket) throws
        -> Walk
    {
        let walk = try walk(directory, uid: uid, naming: directory, label: role.name, creatingWith: nil)
        if walk.missing == nil {
            try checkSocketDirectoryMode(
                try status(of: walk.resolved, socketDirectory: directory, label: role.name),
                walk.resolved,
                of: directory,
                label: role.name
            )
        }
        return walk
    }

    /// Refuses `path` (on the way to `socketDirectory`) unless root or `uid` owns it: whoever owns
    /// a directory can replace what is in it, and whoever owns a link can point it elsewhere.
    static func checkOwner(
        _ info: stat,
        _ path: String,
        of socketDirectory: String,
        uid: uid_t,
        label: String = "socket directory"
    ) throws {
        guard info.st_uid != 0, info.st_uid != uid else { return }
        let what = (info.st_mode & S_IFMT) == S_IFLNK ? "is a symbolic link owned by" : "is owned by"
        throw refusal(socketDirectory, path, "\(what) uid \(info.st_uid) (\(allowedOwners(uid)))", label: label)
    }

    /// Refuses a directory above the socket's own that group or others may write, unless it has
    /// the sticky bit (then only its owner, root and each entry's owner may rename or remove it).
    static func checkAncestorMode(
        _ info: stat,
        _ path: String,
        of socketDirectory: String,
        label: String = "socket directory"
    ) throws {
        guard info.st_mode & 0o022 != 0, info.st_mode & S_ISVTX == 0 else { return }
        throw refusal(
            socketDirectory,
            path,
            "is writable by group or others (mode \(octal(info.st_mode)))",
            label: label
        )
    }

    /// Refuses the socket's own directory when group or others may write it, sticky bit or not:
    /// they could take the socket's name before the agent binds it.
    static func checkSocketDirectoryMode(
        _ info: stat,
        _ path: String,
        of socketDirectory: String,
        label: String = "socket directory"
    ) throws {
        guard info.st_mode & 0o022 != 0 else { return }
        throw refusal(
            socketDirectory,
            path,
            "is writable by group or others (mode \(octal(info.st_mode)))",
            label: label
        )
    }

    /// Creates the directory `path` (mode `mode`, ``directoryMode`` unless said, owned by the
    /// agent), whose parent has been checked. `mkdir` never follows a symbolic link; one that
    /// exists already (made by someone else in the meantime) is left for the caller to check.
    static func createDirectory(
        _ path: String,
        socketDirectory: String,
        label: String = "socket directory",
        mode: mode_t = directoryMode
    ) throws {
        guard mkdir(path, mode) == 0 else {
            if errno == EEXIST { return }
            throw Problem(
                description: "cannot create directory \(path) for \(label) \(socketDirectory): \(errorText())"
            )
        }
        // The umask may have taken bits away: set exactly `mode` on the directory just made.
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Problem(description: "cannot open directory \(path): \(errorText())") }
        defer { close(fd) }
        guard fchmod(fd, mode) == 0 else {
            throw Problem(description: "cannot set the mode of directory \(path): \(errorText())")
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

    // MARK: - Helpers

    /// The `lstat` of `path`, creating it as a directory first when it is missing.
    static func statusCreatingDirectory(
        _ path: String,
        socketDirectory: String,
        label: String,
        mode: mode_t
    ) throws -> stat {
        var info = stat()
        if lstat(path, &info) == 0 { return info }
        guard errno == ENOENT else {
            throw refusal(socketDirectory, path, "cannot be examined (\(errorText()))", label: label)
        }
        try createDirectory(path, socketDirectory: socketDirectory, label: label, mode: mode)
        return try status(of: path, socketDirectory: socketDirectory, label: label)
    }

    /// The `lstat` of `path`, or `nil` when it does not exist.
    static func statusIfPresent(_ path: String, socketDirectory: String, label: String) throws -> stat? {
        var info = stat()
        if lstat(path, &info) == 0 { return info }
        guard errno == ENOENT else {
            throw refusal(socketDirectory, path, "cannot be examined (\(errorText()))", label: label)
        }
        return nil
    }

    /// The `lstat` of `path`, which must exist.
    static func status(of path: String, socketDirectory: String, label: String = "socket directory") throws -> stat {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw refusal(socketDirectory, path, "cannot be examined (\(errorText()))", label: label)
        }
        return info
    }

    /// What the symbolic link `path` points at.
    static func linkTarget(_ path: String, socketDirectory: String, label: String) throws -> String {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else {
            throw refusal(socketDirectory, path, "cannot be read (\(errorText()))", label: label)
        }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    static func components(of path: String) -> [String] {
        path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
    }

    static func currentDirectory() -> String {
        guard let cwd = getcwd(nil, 0) else { return "/" }
        defer { free(cwd) }
        return String(cString: cwd)
    }

    /// The problem for `socketDirectory`, naming `path` on its way when that is another path.
    static func refusal(
        _ socketDirectory: String,
        _ path: String,
        _ reason: String,
        label: String = "socket directory"
    ) -> Problem {
        let subject = path == socketDirectory ? "" : ": \(path)"
        return Problem(description: "\(label) \(socketDirectory)\(subject) \(reason); refusing to use it")
    }

    private static func allowedOwners(_ uid: uid_t) -> String {
        uid == 0 ? "not root, the agent's uid" : "not root or the agent's uid \(uid)"
    }

    static func octal(_ mode: mode_t) -> String {
        "0" + String(mode & 0o7777, radix: 8)
    }

    static func errorText() -> String {
        String(cString: strerror(errno))
    }
}

/// The one walk every directory check makes (the socket's, the cache file's, prepare-directories'),
/// one component at a time as the kernel resolves a path, under ``SocketPath/Rules``, and where it
/// ends as device and inode (``SocketPath/Location``), so that directories are compared as what
/// they are rather than by their paths' text.
extension SocketPath {
    /// The walk of ``resolveSafely(_:uid:naming:label:creatingWith:rules:)``; with `mode` `nil` a
    /// missing directory is not created and ends the walk (the names after it are taken as text,
    /// into ``Walk/location``).
    static func walk(
        _ directory: String,
        uid: uid_t,
        naming subject: String,
        label: String,
        creatingWith mode: mode_t?,
        rules: Rules = .agent
    ) throws -> Walk {
        let absolute = directory.hasPrefix("/") ? directory : currentDirectory() + "/" + directory
        var pending = components(of: absolute)
        var resolved: [String] = []
        var links = 0
        var info = try status(of: "/", socketDirectory: subject, label: label)
        try check(info, "/", of: subject, uid: uid, label: label, rules: rules)
        // `/` first, then one a name of `resolved`.
        let root = FileIdentity(info)
        var identities = [root]
        while !pending.isEmpty {
            let name = pending.removeFirst()
            if name == "." { continue }
            if name == ".." {
                _ = resolved.popLast()
                if identities.count > 1 { identities.removeLast() }
                continue
            }
            let candidate = "/" + (resolved + [name]).joined(separator: "/")
            if let mode {
                info = try statusCreatingDirectory(candidate, socketDirectory: subject, label: label, mode: mode)
            } else if let present = try statusIfPresent(candidate, socketDirectory: subject, label: label) {
                info = present
            } else {
                // The rest is still to be created: where it would be, as text below what exists.
                var remaining = [name]
                for later in pending where later != "." {
                    if later != ".." {
                        remaining.append(later)
                    } else if remaining.popLast() == nil {
                        _ = resolved.popLast()
                        if identities.count > 1 { identities.removeLast() }
                    }
                }
                return Walk(
                    resolved: "/" + resolved.joined(separator: "/"),
                    missing: candidate,
                    location: Location(identities: identities, remaining: remaining)
                )
            }
            try check(info, candidate, of: subject, uid: uid, label: label, rules: rules)
            switch info.st_mode & S_IFMT {
            case S_IFLNK:
                if rules == .privileged {
                    throw refusal(
                        subject,
                        candidate,
                        "is a symbolic link: run as root, prepare-directories follows none",
                        label: label
                    )
                }
                links += 1
                guard links <= maxSymbolicLinks else {
                    throw refusal(subject, candidate, "has too many levels of symbolic links", label: label)
                }
                let target = try linkTarget(candidate, socketDirectory: subject, label: label)
                if target.hasPrefix("/") {
                    resolved = []
                    identities = [root]
                }
                pending = components(of: target) + pending
            case S_IFDIR:
                if rules != .none { try checkAncestorMode(info, candidate, of: subject, label: label) }
                resolved.append(name)
                identities.append(FileIdentity(info))
            default:
                throw refusal(subject, candidate, "is not a directory", label: label)
            }
        }
        return Walk(
            resolved: "/" + resolved.joined(separator: "/"),
            location: Location(identities: identities, remaining: [])
        )
    }

    /// The device and inode of a file: what it is, whatever path names it.
    struct FileIdentity: Sendable, Hashable {
        var device: UInt64
        var inode: UInt64

        init(_ info: stat) {
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
        }
    }

    /// Where a directory is on the file system, compared by device and inode rather than by
    /// text (`/run//a`, `/run/./a`, `/run/b/../a`, a link to `/run/a` and a bind mount of it are
    /// all `/run/a`): the directories from `/` to the deepest one on its way that exists, then
    /// the names still to be created below that one (`.` and `..` applied).
    struct Location: Sendable, Equatable {
        /// `/` first, the deepest directory that exists last.
        var identities: [FileIdentity]
        /// The names below the last of ``identities`` that do not exist yet.
        var remaining: [String]

        /// Whether `other` is this directory, or a directory below it.
        func contains(_ other: Location) -> Bool {
            guard let deepest = identities.last else { return false }
            if remaining.isEmpty { return other.identities.contains(deepest) }
            // What does not exist here cannot exist on other's way: the same missing names below
            // the same directory.
            return other.identities.last == deepest && other.remaining.starts(with: remaining)
        }

        /// Whether `other` is this very directory.
        func isSame(as other: Location) -> Bool {
            identities.last == other.identities.last && remaining == other.remaining
        }
    }

    /// The rules a walk holds the directories on its way to.
    enum Rules: Sendable {
        /// The agent's own (its socket and cache file directories): every directory root's or the
        /// agent's uid's, and a symbolic link of either followed.
        case agent
        /// A privileged step for the agent's uid (`prepare-directories` as root): every
        /// directory on the way root's, never the agent's uid's nor another's, and no symbolic
        /// link followed. What an unprivileged uid owns or may write, it could swap for a link or
        /// for another directory of root's, which the step would then give away.
        case privileged
        /// None: the path is resolved as the kernel resolves it, to learn where it is.
        case none
    }

    /// Where `directory` is (``Location``), resolved as the kernel would (symbolic links
    /// followed), nothing checked and nothing created; `nil` when it cannot be resolved (the
    /// start then refuses it for its own reasons).
    static func locate(_ directory: String) -> Location? {
        try? walk(directory, uid: 0, naming: directory, label: "directory", creatingWith: nil, rules: .none).location
    }

    /// The walk of ``inspectDirectory(_:uid:role:)``, under `rules`, without the check of the
    /// directory's own mode: every directory on the way that exists is checked (the directory
    /// itself included), and the walk stops at the first missing one.
    static func inspectWay(
        _ directory: String,
        uid: uid_t,
        naming subject: String,
        label: String,
        rules: Rules
    ) throws -> Walk {
        try walk(directory, uid: uid, naming: subject, label: label, creatingWith: nil, rules: rules)
    }

    /// The owner check of a walk under `rules` (and, for `/`, its mode).
    static func check(_ info: stat, _ path: String, of subject: String, uid: uid_t, label: String, rules: Rules)
        throws
    {
        switch rules {
        case .none:
            return
        case .agent:
            try checkOwner(info, path, of: subject, uid: uid, label: label)
        case .privileged:
            guard info.st_uid != 0 else { break }
            let what = (info.st_mode & S_IFMT) == S_IFLNK ? "is a symbolic link owned by" : "is owned by"
            throw refusal(
                subject,
                path,
                "\(what) uid \(info.st_uid), not root: run as root, prepare-directories passes only through "
                    + "root's directories (another uid could swap what is in it)",
                label: label
            )
        }
        if path == "/" { try checkAncestorMode(info, path, of: subject, label: label) }
    }
}
