import CSocketLoop
import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// Reads a connected Unix socket's peer credentials: `SO_PEERCRED` (pid, uid, gid) and
/// `SO_PEERGROUPS` (supplementary groups).
enum PeerCredentialsReader {
    /// The peer of the connected Unix socket `socket`, or `nil` when the kernel cannot tell.
    static func read(socket: Int32) -> PeerCredentials? {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
        guard fsl_peer_credentials(socket, &pid, &uid, &gid) == 0 else { return nil }
        // Asked only of the agent's own uid, the one the answer matters for (``AccessRules``).
        let inAgentPIDNamespace = uid == ownUID && fsl_peer_in_own_pid_namespace(socket) == 1
        var buffer = GroupBuffer(repeating: 0)
        var length = socklen_t(MemoryLayout<GroupBuffer>.size)
        let result = withUnsafeMutableBytes(of: &buffer) { raw in
            getsockopt(socket, SOL_SOCKET, peerGroupsOption, raw.baseAddress, &length)
        }
        guard result == 0 else {
            // Too many groups for the buffer, or an old kernel: the process's own record.
            return PeerCredentials(
                pid: pid,
                uid: uid,
                gid: gid,
                groups: procGroups(pid: pid),
                inAgentPIDNamespace: inAgentPIDNamespace
            )
        }
        var groups: [UInt32] = []
        for index in 0..<min(Int(length) / 4, buffer.count) { groups.append(buffer[index]) }
        return PeerCredentials(pid: pid, uid: uid, gid: gid, groups: groups, inAgentPIDNamespace: inAgentPIDNamespace)
    }

    /// The agent's own uid.
    private static let ownUID = getuid()

    /// Room for the supplementary groups; a peer with more is read from `/proc`.
    private typealias GroupBuffer = InlineArray<256, UInt32>

    private static let peerGroupsOption: Int32 = 59  // SO_PEERGROUPS (Linux 4.13)

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
