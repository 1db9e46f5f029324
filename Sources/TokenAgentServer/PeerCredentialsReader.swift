import NIOCore
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a connected Unix socket's peer credentials through SwiftNIO's socket options:
/// `SO_PEERCRED` (pid, uid, gid) and `SO_PEERGROUPS` (supplementary groups).
enum PeerCredentialsReader {
    /// `struct ucred`, which Swift's Glibc module does not export.
    private struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// Room for the supplementary groups; a peer with more is read from `/proc`.
    private typealias GroupBuffer = InlineArray<256, UInt32>

    private static let peerCredOption: Int32 = 17  // SO_PEERCRED
    private static let peerGroupsOption: Int32 = 59  // SO_PEERGROUPS (Linux 4.13)

    /// The peer of `channel`, or `nil` when the channel cannot tell (not a Unix socket).
    static func read(_ channel: any Channel) -> EventLoopFuture<PeerCredentials?> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let level = SocketOptionLevel(SOL_SOCKET)
        let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: level,
            name: SocketOptionName(peerCredOption)
        )
        return credentials.flatMap { cred -> EventLoopFuture<PeerCredentials?> in
            let groups: EventLoopFuture<GroupBuffer> = provider.unsafeGetSocketOption(
                level: level,
                name: SocketOptionName(peerGroupsOption)
            )
            return groups.map { buffer -> PeerCredentials? in
                PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid, groups: Self.groups(in: buffer))
            }.recover { _ in
                // Too many groups for the buffer, or an old kernel: the process's own record.
                PeerCredentials(pid: cred.pid, uid: cred.uid, gid: cred.gid, groups: Self.procGroups(pid: cred.pid))
            }
        }.recover { _ in nil }
    }

    /// The groups `SO_PEERGROUPS` wrote. The kernel keeps a process's groups sorted ascending and
    /// NIO zeroes the buffer first, so the groups are the leading run of ascending values; a
    /// leading 0 is gid 0 only when more groups follow (a lone gid 0 reads as no groups, which
    /// matters only to rules that name group 0).
    static func groups(in buffer: InlineArray<256, UInt32>) -> [UInt32] {
        var end = 1
        while end < buffer.count, buffer[end] != 0 { end += 1 }
        if end == 1, buffer[0] == 0 { return [] }
        var groups: [UInt32] = []
        for index in 0..<end { groups.append(buffer[index]) }
        return groups
    }

    /// The `Groups:` line of `/proc/<pid>/status`.
    private static func procGroups(pid: Int32) -> [UInt32] {
        // pid 0: a peer outside the agent's PID namespace, whose record cannot be read here.
        guard pid > 0, let status = ProcFile.read("/proc/\(pid)/status") else { return [] }
        for line in status.split(separator: "\n") where line.hasPrefix("Groups:") {
            return line.dropFirst("Groups:".count).split(whereSeparator: { $0 == " " || $0 == "\t" })
                .compactMap { UInt32($0) }
        }
        return []
    }
}

/// Small reads of `/proc` files.
enum ProcFile {
    /// The file's text (at most 8 KiB), or `nil` when it cannot be read.
    static func read(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        guard count >= 0 else { return nil }
        return String(decoding: bytes[..<count], as: UTF8.self)
    }

    /// A process's name (`/proc/<pid>/comm`), if it can be read.
    static func processName(pid: Int32) -> String? {
        guard pid > 0, let comm = read("/proc/\(pid)/comm") else { return nil }
        let name = comm.split(separator: "\n").first.map(String.init) ?? ""
        return name.isEmpty ? nil : name
    }
}
