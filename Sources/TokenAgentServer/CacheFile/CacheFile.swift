import CSocketLoop
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The cache file (`cache_file`): a ``CacheSnapshot`` the agent writes at stop and every
/// `cache_file_interval`, and adopts at start, so its tokens outlive the process wherever it runs.
///
/// Its directory follows the socket directory's rules (``SocketPath/secureDirectory(_:uid:role:)``:
/// every directory on the way owned by root or the agent, none writable by others unless sticky,
/// its own not writable by group or others; a missing one is created, mode 0700). It must be on a
/// memory-backed file system (tmpfs or ramfs, by `statfs`) unless `cache_file_on_disk` is set:
/// tokens are secrets, and a disk outlives the host's trust. The file is written atomically (a
/// temporary file beside it, `fsync`, `rename`, then the directory's `fsync`), mode 0600, owned by
/// the agent's uid; it is read with `O_NOFOLLOW`, and refused unless it is a regular file of the
/// agent's uid, without group or other permissions, with one link, and at most
/// ``CacheSnapshot/maxBytes``, of which no more token lines are decoded than the cache can hold.
///
/// The start stops (``prepare()``) when the directory is the socket's, compared by device and inode
/// (``SocketPath/Location``), or when something other than a regular file or a symbolic link is
/// at the path (a device, a FIFO, a socket, a directory): a write would replace it. A running agent
/// holds `<file>.lock` (``lock()``, `flock`), so a second agent on the same file is refused at
/// start, and a crash lets go of it.
public struct CacheFile: SnapshotDestination {
    /// The file's path (absolute).
    public let path: String
    /// Whether a file system that is not memory-backed is allowed (`cache_file_on_disk`).
    public let onDisk: Bool
    /// The uid that must own it: the agent's.
    public let uid: uid_t
    /// The agent's socket (`socket`), whose directory workers reach: the file's directory must
    /// not be it. `nil`: not checked.
    public let socketPath: String?

    /// Why the file cannot be used, read or written.
    public struct Problem: Error, CustomStringConvertible, Equatable {
        /// What is wrong.
        public var description: String
    }

    /// `statfs` magic numbers of the memory-backed file systems (`linux/magic.h`).
    static let tmpfsMagic = 0x0102_1994
    static let ramfsMagic = 0x8584_58f6

    /// The destination's name in logs and metrics.
    public var name: String { "file" }

    /// A file: never an access token in it, whatever file system it is on.
    public var medium: TokenCacheMedium { .disk }

    /// The cache file at `path`, for the agent's uid, apart from the directory of `socketPath`.
    public init(path: String, onDisk: Bool, uid: uid_t = geteuid(), socketPath: String? = nil) {
        self.path = path
        self.onDisk = onDisk
        self.uid = uid
        self.socketPath = socketPath
    }

    /// The directory the file goes in.
    public var directory: String { SocketPath.directory(of: path) }

    /// The temporary file a write goes through, beside the file.
    var temporaryPath: String { path + ".tmp" }

    /// Checks the directory (creating what is missing, mode 0700), that it is not the socket's,
    /// its file system, and what is at the path; the start of the agent stops on a problem, which
    /// names `cache_file` (or, for the file system, says how `cache_file_on_disk` allows it).
    public func prepare() throws(Problem) {
        do {
            // Checked and compared before anything is created.
            let walk = try SocketPath.inspectDirectory(directory, uid: uid, role: .cacheFile)
            try checkApartFromSocket(walk.location)
            try SocketPath.secureDirectory(directory, uid: uid, role: .cacheFile)
        } catch let problem as Problem {
            throw problem
        } catch {
            throw Problem(description: "\(error)")
        }
        try checkFileSystem()
        try checkWhatIsThere()
    }

    /// Refuses a directory at `location` that is the socket's directory (``socketPath``), compared
    /// by device and inode: `<socket directory>//tokens.cache`, `<socket directory>/./…`,
    /// `<socket directory>/sub/../…` and a link to it are all in the directory workers reach.
    func checkApartFromSocket(_ location: SocketPath.Location) throws(Problem) {
        guard let socketPath else { return }
        let socketDirectory = SocketPath.directory(of: socketPath)
        guard let socket = SocketPath.locate(socketDirectory), socket.isSame(as: location) else { return }
        throw Problem(
            description:
                "\(path) is in the socket's directory \(socketDirectory) (the same directory on the file system), "
                + "which workers can reach: use a directory of the agent's own"
        )
    }

    /// Refuses what is at the path when a write would replace what it must not: anything but a
    /// regular file or a symbolic link (which a write replaces, never following it). A character
    /// device such as `/dev/null`, a FIFO, a socket or a directory stops the start.
    func checkWhatIsThere() throws(Problem) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            guard errno == ENOENT else {
                throw Problem(description: "\(path) cannot be examined: \(Self.errorText())")
            }
            return
        }
        let type = info.st_mode & S_IFMT
        guard type != S_IFREG, type != S_IFLNK else { return }
        throw Problem(
            description:
                "\(path) is \(Self.typeName(type)), not a regular file: each write of the cache would replace it; "
                + "remove it, or choose another path"
        )
    }

    /// `a character device`, `a FIFO`, … for a `stat` file type.
    static func typeName(_ type: mode_t) -> String {
        switch type {
        case S_IFCHR: return "a character device"
        case S_IFBLK: return "a block device"
        case S_IFIFO: return "a FIFO"
        case S_IFSOCK: return "a socket"
        case S_IFDIR: return "a directory"
        case S_IFLNK: return "a symbolic link"
        case S_IFREG: return "a regular file"
        default: return "a file of another type"
        }
    }

    /// Refuses a directory whose file system is not tmpfs or ramfs, unless ``onDisk``; returns the
    /// `statfs` type. `path`: where to look, when the directory does not exist yet (the deepest
    /// directory on its way that does, whose file system a new directory in it would be on).
    @discardableResult
    func checkFileSystem(at path: String? = nil) throws(Problem) -> Int {
        let examined = path ?? directory
        var type64: Int64 = 0
        guard fsl_file_system_type(examined, &type64) == 0 else {
            throw Problem(description: "cannot examine the file system of \(examined): \(Self.errorText())")
        }
        let type = Int(type64)
        guard !onDisk, type != Self.tmpfsMagic, type != Self.ramfsMagic else { return type }
        throw Problem(
            description:
                "\(directory) is on \(Self.fileSystemName(type)), not a memory-backed file system (tmpfs or ramfs): "
                + "tokens are secrets and a disk outlives the host's trust; use a directory on tmpfs "
                + "(such as one under /run or /dev/shm), or set cache_file_on_disk to true"
        )
    }

    /// What reading the file found.
    public enum ReadOutcome: Sendable {
        /// No file: a first start.
        case absent
        /// A file that is refused as a whole, and why; nothing of it is taken.
        case refused(String)
        /// The snapshot's contents, each token still to be checked (``SnapshotAdoption``).
        case read(CacheSnapshot.Contents)
    }

    /// Reads the file: `O_NOFOLLOW`, then the checks on what was opened (`fstat`), then at most
    /// ``CacheSnapshot/maxBytes`` of it, then the snapshot's own checks (version, length,
    /// checksum), decoding at most `maxTokens` token lines (the agent's `max_entries`: the lines
    /// past them are counted, never decoded). Never throws: a file that fails is
    /// ``ReadOutcome/refused(_:)``.
    public func read(maxTokens: Int = .max) -> ReadOutcome {
        // O_NONBLOCK: a FIFO put in the file's place must not hold the start up.
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return .absent
            case ELOOP: return .refused("is a symbolic link")
            default: return .refused("cannot be opened: \(Self.errorText())")
            }
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return .refused("cannot be examined: \(Self.errorText())") }
        if let problem = Self.problem(with: info, uid: uid) { return .refused(problem) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Int(info.st_size))
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        while bytes.count <= CacheSnapshot.maxBytes {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count == 0 { break }
            if count < 0 {
                if errno == EINTR { continue }
                return .refused("cannot be read: \(Self.errorText())")
            }
            bytes += chunk[0..<count]
        }
        do {
            return .read(try CacheSnapshot.read(bytes, maxTokens: maxTokens))
        } catch {
            return .refused(error.description)
        }
    }

    /// Why a file with `info` is refused, or `nil`: not a regular file, another owner, group or
    /// other permissions, another link to it, or over the size limit.
    static func problem(with info: stat, uid: uid_t) -> String? {
        guard info.st_mode & S_IFMT == S_IFREG else { return "is not a regular file" }
        guard info.st_uid == uid else { return "is owned by uid \(info.st_uid), not the agent's uid \(uid)" }
        guard info.st_mode & 0o077 == 0 else {
            return "has mode 0\(String(info.st_mode & 0o7777, radix: 8)): group or others may use it (0600 is written)"
        }
        guard info.st_nlink == 1 else { return "has \(info.st_nlink) links" }
        guard info.st_size <= CacheSnapshot.maxBytes else {
            return "is \(info.st_size) bytes, over the limit of \(CacheSnapshot.maxBytes)"
        }
        return nil
    }

    /// The names of common file systems by `statfs` type (`linux/magic.h`).
    static let knownFileSystems: [Int: String] = [
        tmpfsMagic: "tmpfs", ramfsMagic: "ramfs", 0xEF53: "ext2/ext3/ext4", 0x5846_5342: "xfs",
        0x9123_683E: "btrfs", 0x794C_7630: "overlayfs", 0x6969: "nfs", 0x6573_5546: "fuse", 0x2FC1_2FC1: "zfs",
        0x0102_1997: "9p",
    ]

    /// A name for the file system of `statfs` type `type`.
    static func fileSystemName(_ type: Int) -> String {
        knownFileSystems[type].map { "\($0) (statfs type 0x\(String(type, radix: 16)))" }
            ?? "a file system of statfs type 0x\(String(type, radix: 16))"
    }

    public static func errorText() -> String { String(cString: strerror(errno)) }
}

extension CacheFile {
    /// The lock file beside the cache file: the agent that uses the file holds it (`flock`) from
    /// its start to its end.
    public var lockPath: String { path + ".lock" }

    /// A held lock on the cache file (``lock()``): let go when it is released, or when the process
    /// ends however it ends (a crash, `kill -9`), as the kernel drops a `flock` with its last
    /// descriptor.
    public final class Lock: Sendable {
        private let fd: Int32

        fileprivate init(fd: Int32) { self.fd = fd }

        deinit { close(fd) }
    }

    /// Takes the lock on the file (`<file>.lock`, made mode 0600 when missing, `flock` exclusive
    /// and without waiting), so that no two agents write the same file: both would go through one
    /// `<file>.tmp`, and one could rename the other's half-written file over the cache. Throws,
    /// saying that another agent uses the file (and its pid, which the holder writes in the lock
    /// file), when one holds it; and when the lock file is a symbolic link or not a regular file
    /// of the agent's uid with one link. The directory is checked first (``prepare()``).
    public func lock() throws(Problem) -> Lock {
        let lockPath = lockPath
        let fd = open(lockPath, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0o600)
        guard fd >= 0 else {
            if errno == ELOOP { throw Problem(description: "\(lockPath) is a symbolic link; refusing to use it") }
            throw Problem(description: "cannot open \(lockPath): \(Self.errorText())")
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let problem = Problem(description: "cannot examine \(lockPath): \(Self.errorText())")
            close(fd)
            throw problem
        }
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == uid, info.st_nlink == 1 else {
            close(fd)
            throw Problem(
                description:
                    "\(lockPath) is \(Self.typeName(info.st_mode & S_IFMT)) of uid \(info.st_uid) with "
                    + "\(info.st_nlink) links, not a regular file of the agent's uid \(uid) with one; refusing to use it"
            )
        }
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            let busy = errno == EWOULDBLOCK
            let problem =
                busy
                ? Problem(
                    description:
                        "another agent uses \(path)\(Self.holder(fd).map { " (pid \($0))" } ?? ""): it holds "
                        + "\(lockPath); two agents must not share a cache file: stop the other agent, or give "
                        + "this one a cache_file of its own"
                )
                : Problem(description: "cannot lock \(lockPath): \(Self.errorText())")
            close(fd)
            throw problem
        }
        // The holder's pid, for the message of an agent refused: nothing else is in the file.
        if info.st_mode & 0o7777 != 0o600 { _ = fchmod(fd, 0o600) }
        if ftruncate(fd, 0) == 0 {
            let text = Array("\(getpid())\n".utf8)
            _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        }
        return Lock(fd: fd)
    }

    /// Whether an agent holds the lock now, and its pid, found in `/proc/locks` by the lock file's
    /// device and inode: without opening the file or taking the lock, so a `check-config` beside
    /// a running agent (or one starting) changes nothing. `nil` when no lock file exists or no
    /// `flock` is held on it.
    public func lockHolder() -> Int? {
        var info = stat()
        guard lstat(lockPath, &info) == 0, info.st_mode & S_IFMT == S_IFREG,
            let table = try? String(contentsOfFile: "/proc/locks", encoding: .utf8)
        else { return nil }
        let device = UInt64(info.st_dev)
        // glibc's major() and minor(), as /proc/locks prints them: hex major, hex minor, inode.
        let major = ((device >> 8) & 0xFFF) | ((device >> 32) & ~UInt64(0xFFF))
        let minor = (device & 0xFF) | ((device >> 12) & ~UInt64(0xFF))
        let key =
            String(major, radix: 16).leftPadded(2) + ":" + String(minor, radix: 16).leftPadded(2) + ":"
            + String(UInt64(info.st_ino))
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ")
            // "1: FLOCK  ADVISORY  WRITE 1234 00:2b:5678 0 EOF" (a blocked waiter's line has "->").
            guard fields.count >= 6, fields[1] == "FLOCK", !fields.contains("->"), fields[5] == key else { continue }
            return Int(fields[4])
        }
        return nil
    }

    private static func holder(_ fd: Int32) -> Int? {
        var buffer = [UInt8](repeating: 0, count: 24)
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0 else { return nil }
        let digits = buffer[..<count].prefix { (0x30...0x39).contains($0) }
        guard !digits.isEmpty, digits.count < 12 else { return nil }
        return Int(String(decoding: digits, as: UTF8.self))
    }
}

extension String {
    /// The text with `0`s before it up to `width` characters.
    fileprivate func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}

extension CacheFile {
    /// Starts a snapshot in the file's place, to be written atomically: the directory, its
    /// file system and what is at the path (``checkWhatIsThere()``) are checked again, and a temporary file beside it (`<file>.tmp`, made anew,
    /// mode 0600) takes the body as it comes; the commit writes the header at its start, syncs
    /// it, renames it over the file and syncs the directory. On a failure, or when abandoned, the
    /// temporary file is removed and the file is left as it was.
    public func begin() throws -> any SnapshotSink {
        do {
            try SocketPath.secureDirectory(directory, uid: uid, role: .cacheFile)
        } catch {
            throw Problem(description: "\(error)")
        }
        try checkFileSystem()
        try checkWhatIsThere()
        let temporary = temporaryPath
        // A temporary file left by a process that died while writing; unlink never follows a link.
        if unlink(temporary) != 0, errno != ENOENT {
            throw Problem(description: "cannot remove \(temporary): \(Self.errorText())")
        }
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Problem(description: "cannot create \(temporary): \(Self.errorText())") }
        // The umask may have taken bits away, never added: set exactly 0600.
        guard fchmod(fd, 0o600) == 0 else {
            let problem = Problem(description: "cannot write \(temporary): chmod: \(Self.errorText())")
            close(fd)
            unlink(temporary)
            throw problem
        }
        return DescriptorSink(fd: fd, placement: TemporaryFile(file: self))
    }

    /// The temporary file a snapshot is written into: synced, then renamed over the file and the
    /// directory synced; removed when the snapshot is given up.
    struct TemporaryFile: DescriptorPlacement {
        let file: CacheFile

        func writeFailed(_ error: any Error) -> any Error {
            Problem(description: "cannot write \(file.temporaryPath): \(error)")
        }

        func seal(_ fd: Int32, _ framing: CacheSnapshot.Encoded) throws {
            guard fsync(fd) == 0 else { throw Problem(description: "fsync: \(CacheFile.errorText())") }
        }

        func place() throws {
            let temporary = file.temporaryPath
            // Never over a device, a FIFO or a socket (``CacheFile/checkWhatIsThere()``), put
            // there since the start.
            do {
                try file.checkWhatIsThere()
            } catch {
                unlink(temporary)
                throw error
            }
            guard rename(temporary, file.path) == 0 else {
                let problem = Problem(
                    description: "cannot rename \(temporary) to \(file.path): \(CacheFile.errorText())"
                )
                unlink(temporary)
                throw problem
            }
            let directoryFD = open(file.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if directoryFD >= 0 {
                _ = fsync(directoryFD)
                close(directoryFD)
            }
        }

        func discard() {
            unlink(file.temporaryPath)
        }
    }
}

extension CacheFile {
    /// What `fleet-tokend check-config` finds of the cache file: its directory checked as
    /// ``prepare()`` checks it at start, but with nothing created, and the file as a start would
    /// read it.
    public struct Inspection: Sendable {
        /// The file system the file is (or, in a directory still to be made, would be) on: `tmpfs`,
        /// `ext2/ext3/ext4`, ..., or `statfs type 0x...` for one without a name here.
        public var fileSystem: String
        /// Whether that file system is memory-backed (tmpfs or ramfs).
        public var memoryBacked: Bool
        /// The first directory on the way that does not exist yet: the agent creates it (mode
        /// 0700) at start. `nil` when the directory exists.
        public var missingDirectory: String?
        /// What a start would read.
        public var file: ReadOutcome
    }

    /// Checks the directory as the start does (``prepare()``: the socket directory's rules, apart
    /// from the socket's by device and inode, a memory-backed file system unless ``onDisk``, and
    /// nothing but a regular file or a link at the path), creating nothing, and reads the file as the
    /// start would (``read()``). Throws what would stop the start; a file the start would refuse
    /// is ``ReadOutcome/refused(_:)`` in the result, since the start goes on cold.
    /// `maxTokens`: the most token lines a start decodes (`max_entries`).
    public func inspect(maxTokens: Int = .max) throws(Problem) -> Inspection {
        let walk: SocketPath.Walk
        do {
            walk = try SocketPath.inspectDirectory(directory, uid: uid, role: .cacheFile)
        } catch {
            throw Problem(description: "\(error)")
        }
        try checkApartFromSocket(walk.location)
        let type = try checkFileSystem(at: walk.resolved)
        if walk.missing == nil { try checkWhatIsThere() }
        return Inspection(
            fileSystem: Self.knownFileSystems[type] ?? "statfs type 0x\(String(type, radix: 16))",
            memoryBacked: type == Self.tmpfsMagic || type == Self.ramfsMagic,
            missingDirectory: walk.missing,
            file: walk.missing == nil ? read(maxTokens: maxTokens) : .absent
        )
    }
}
