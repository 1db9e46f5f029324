#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// What the calling process's user namespace does to the uids the kernel reports.
///
/// `inet_diag` reports a socket's owner as seen from the namespace of the process that asks: a
/// uid not mapped there is reported as the overflow uid (`/proc/sys/kernel/overflowuid`, 65534
/// unless changed), the same number as the real user of that uid. In the initial user namespace
/// every uid is mapped and the number means what it says; anywhere else (an agent in a rootless
/// container) the overflow uid could be anyone, and must not be taken for a user.
public enum UserNamespace {
    /// The uid the kernel reports for an unmapped owner, when this process is not in the initial
    /// user namespace (its `uid_map` is not the whole identity); `nil` in the initial one, where
    /// every reported uid is real. When either file cannot be read, the overflow uid is treated as
    /// ambiguous (65534 if that cannot be read either).
    public static func ambiguousUID() -> UInt32? {
        let overflow = readFile("/proc/sys/kernel/overflowuid").flatMap { UInt32($0.filter { !$0.isWhitespace }) }
        guard let map = readFile("/proc/self/uid_map") else { return overflow ?? 65534 }
        return isIdentityMap(map) ? nil : overflow ?? 65534
    }

    /// Whether `uidMap` (the text of `/proc/<pid>/uid_map`) maps every uid to itself: one line,
    /// `0 0 4294967295`.
    public static func isIdentityMap(_ uidMap: String) -> Bool {
        let lines = uidMap.split(separator: "\n").filter { !$0.allSatisfy(\.isWhitespace) }
        guard lines.count == 1 else { return false }
        return lines[0].split(whereSeparator: \.isWhitespace) == ["0", "0", "4294967295"]
    }

    /// The first 4 KiB of the file at `path`, or `nil`.
    private static func readFile(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = read(fd, &buffer, buffer.count)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }
}
