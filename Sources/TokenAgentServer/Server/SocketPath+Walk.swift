#if canImport(Glibc)
    import Glibc
#endif

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
