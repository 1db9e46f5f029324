import CSocketLoop

#if canImport(Glibc)
    import Glibc
#endif

/// A directory the agent needs, given to it by a step with more privilege than the agent has:
/// `fleet-tokend prepare-directories`, the Kubernetes init container, runs as root with only
/// `CAP_CHOWN` and makes the socket directory and the state directory the agent's before it starts.
///
/// Run as root (``privileged``), the directories on the way to it must all be root's, not
/// writable by group or others unless sticky, and no symbolic link is followed
/// (``SocketPath/Rules/privileged``): a directory the agent's uid owns, or a link it made, would let
/// that uid point the step at a directory of root's, which the step would then give it. Run as
/// another uid, they are held to the rules the agent holds its socket directory's to (owned by root
/// or the agent's uid, symbolic links only of root's or the agent's). A missing one is created
/// 0755. The directory itself must be a directory (never a symbolic link, whoever owns it: its
/// owner and mode are changed, and a link's target must never be) owned by root or the agent's
/// uid: one another uid owns is refused, as the agent refuses it. A missing one is created.
public struct AgentDirectory: Sendable, Hashable {
    /// What the directory is, for messages: "socket directory", "state directory".
    public let label: String
    /// Its absolute path.
    public let path: String
    public let owner: uid_t
    public let group: gid_t
    /// Exactly these bits (with the set-group-ID bit), whatever the umask.
    public let mode: mode_t

    /// The mode of the socket directory: the agent owns it (it binds and removes its socket
    /// there), its group (the workers') may reach the socket but not write, others nothing; the
    /// set-group-ID bit makes the socket file the group's from the moment it is bound.
    public static let socketDirectoryMode: mode_t = 0o2750
    /// The mode of the state directory: the agent's alone.
    public static let stateDirectoryMode: mode_t = 0o700

    /// The socket directory: `owner`'s, in the socket's `group`, mode 2750.
    public static func socketDirectory(_ path: String, owner: uid_t, group: gid_t) -> AgentDirectory {
        AgentDirectory(label: "socket directory", path: path, owner: owner, group: group, mode: socketDirectoryMode)
    }

    /// The agent's state directory: `owner`'s, in its own `group`, mode 0700.
    public static func stateDirectory(_ path: String, owner: uid_t, group: gid_t) -> AgentDirectory {
        AgentDirectory(label: "state directory", path: path, owner: owner, group: group, mode: stateDirectoryMode)
    }

    /// What ``prepare()`` did.
    public enum Outcome: Sendable, Equatable {
        /// It was missing and is made.
        case created
        /// It had another owner, group or mode, described as `0755 0:0`.
        case changed(from: String)
        /// It was as asked already; nothing was changed.
        case unchanged
    }

    /// Whether the step runs as root: then the walk to the directory follows no link and passes
    /// only through root's directories (``SocketPath/Rules/privileged``).
    public static var privileged: Bool { geteuid() == 0 }

    /// The rules the directories on the way are held to.
    private var rules: SocketPath.Rules { Self.privileged ? .privileged : .agent }

    /// Where the directory is (``SocketPath/Location``), by device and inode, with the checks
    /// ``prepare()`` makes on the way and nothing created or changed: two directories are compared
    /// by it, never by their paths' text. Throws what ``prepare()`` would refuse on the way, or a
    /// symbolic link or a file in the directory's place.
    func locate() throws -> SocketPath.Location {
        let name = try checkedName()
        let parent = try SocketPath.inspectWay(
            SocketPath.directory(of: path),
            uid: owner,
            naming: path,
            label: label,
            rules: rules
        )
        var location = parent.location
        guard parent.missing == nil else {
            location.remaining.append(name)
            return location
        }
        let resolved = parent.resolved == "/" ? "/" + name : parent.resolved + "/" + name
        var info = stat()
        guard lstat(resolved, &info) == 0 else {
            guard errno == ENOENT else { throw refusal(resolved, "cannot be examined (\(SocketPath.errorText()))") }
            location.remaining.append(name)
            return location
        }
        try checkType(info, resolved)
        location.identities.append(SocketPath.FileIdentity(info))
        return location
    }

    /// Whether this directory and `other` are apart on the file system, by device and inode
    /// (``locate()``): neither is the other, nor in it. Throws what locating either throws (what
    /// ``prepare()`` would refuse on its way).
    public func isApart(from other: AgentDirectory) throws -> Bool {
        let mine = try locate()
        let theirs = try other.locate()
        return !mine.contains(theirs) && !theirs.contains(mine)
    }

    /// The directory's last name; throws unless the path is absolute and ends in one.
    private func checkedName() throws -> String {
        let name = path.split(separator: "/").last.map(String.init) ?? "/"
        guard path.hasPrefix("/"), !name.isEmpty, name != "/", name != ".", name != ".." else {
            throw SocketPath.Problem(description: "\(label) \(path) is not an absolute path ending in a name")
        }
        return name
    }

    /// Refuses what is not a directory in its place.
    private func checkType(_ info: stat, _ resolved: String) throws {
        switch info.st_mode & S_IFMT {
        case S_IFDIR: break
        case S_IFLNK: throw refusal(resolved, "is a symbolic link")
        default: throw refusal(resolved, "is not a directory")
        }
    }

    /// The mode, owner and group asked for, as `2750 10100:10200`.
    public var wanted: String { Self.describe(mode: mode, owner: owner, group: group) }

    /// Makes the directory exactly ``mode``, ``owner`` and ``group``, creating it when it is
    /// missing, or throws a problem saying why it cannot or will not.
    ///
    /// Every change goes through a descriptor of the directory opened without following a link
    /// (`O_PATH | O_NOFOLLOW`), never through its path again. With only `CAP_CHOWN`: it is given
    /// to root first, so that the mode is set by its owner in its group (no `CAP_FOWNER`, and no
    /// `CAP_FSETID` for the set-group-ID bit), then to ``owner`` and ``group`` (Linux keeps a
    /// directory's set-group-ID bit across `chown`). The result is checked on the descriptor.
    public func prepare() throws -> Outcome {
        let name = try checkedName()
        let parent = try SocketPath.resolveSafely(
            SocketPath.directory(of: path),
            uid: owner,
            naming: path,
            label: label,
            rules: rules
        )
        let resolved = parent == "/" ? "/" + name : parent + "/" + name
        var created = false
        var info = stat()
        if lstat(resolved, &info) != 0 {
            guard errno == ENOENT else { throw refusal(resolved, "cannot be examined (\(SocketPath.errorText()))") }
            if mkdir(resolved, 0o700) == 0 {
                created = true
            } else if errno != EEXIST {
                throw SocketPath.Problem(description: "cannot create \(label) \(path): \(SocketPath.errorText())")
            }
            info = try SocketPath.status(of: resolved, socketDirectory: path, label: label)
        }
        try checkType(info, resolved)
        try SocketPath.checkOwner(info, resolved, of: path, uid: owner, label: label)
        if !created, matches(info) { return .unchanged }

        let fd = fsl_open_directory_path(resolved)
        guard fd >= 0 else { throw refusal(resolved, "cannot be opened (\(SocketPath.errorText()))") }
        defer { close(fd) }
        var opened = stat()
        guard fstat(fd, &opened) == 0, opened.st_dev == info.st_dev, opened.st_ino == info.st_ino else {
            throw refusal(resolved, "was replaced while it was being prepared")
        }
        if opened.st_uid != 0 || opened.st_gid != 0 {
            try change(fsl_chown_descriptor(fd, 0, 0), "give \(label) \(path) to root (0:0)")
        }
        try change(fsl_chmod_descriptor(fd, mode), "set the mode of \(label) \(path) to \(SocketPath.octal(mode))")
        try change(fsl_chown_descriptor(fd, owner, group), "give \(label) \(path) to \(owner):\(group)")
        var after = stat()
        guard fstat(fd, &after) == 0, matches(after) else {
            throw SocketPath.Problem(
                description: "\(label) \(path) is \(Self.describe(after)) after preparing it, not \(wanted)"
            )
        }
        return created ? .created : .changed(from: Self.describe(info))
    }

    /// `2750 10100:10200`, `0755 0:0` for `info`.
    static func describe(_ info: stat) -> String {
        describe(mode: info.st_mode, owner: info.st_uid, group: info.st_gid)
    }

    private static func describe(mode: mode_t, owner: uid_t, group: gid_t) -> String {
        let octal = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - octal.count)) + octal + " \(owner):\(group)"
    }

    private func matches(_ info: stat) -> Bool {
        info.st_mode & S_IFMT == S_IFDIR && info.st_mode & 0o7777 == mode && info.st_uid == owner
            && info.st_gid == group
    }

    private func change(_ result: Int32, _ what: String) throws {
        guard result != 0 else { return }
        let hint = errno == EPERM ? " (it takes root with CAP_CHOWN)" : ""
        throw SocketPath.Problem(description: "cannot \(what): \(SocketPath.errorText())\(hint)")
    }

    private func refusal(_ resolved: String, _ reason: String) -> SocketPath.Problem {
        SocketPath.refusal(path, resolved, reason, label: label)
    }
}
