import TokenAgent

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#endif

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
