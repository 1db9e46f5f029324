import Foundation
import TestSupport
import Testing

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// What `fleet-tokend prepare-directories` does to a directory (``AgentDirectory``), on real
/// directories: they are given to other uids, so as root only. The command itself, with only
/// `CAP_CHOWN`, is tested in IntegrationTests (PrepareDirectoriesTests).
@Suite(
    "Agent directories: prepared for the agent's uid",
    .enabled(if: getuid() == 0, "gives directories to other uids: needs root")
)
struct AgentDirectoryTests {
    let agent: uid_t = 10100
    let agentGroup: gid_t = 10100
    let socketGroup: gid_t = 10200
    let stranger: uid_t = 4242

    /// A new directory for one test, 0755 root:root as the kubelet makes a hostPath.
    private func makeBase() throws -> String {
        let path = TestTemporary.path("ftd-ad")
        try makeDirectory(path, mode: 0o755)
        return path
    }

    private func makeDirectory(_ path: String, mode: mode_t, owner: uid_t = 0, group: gid_t = 0) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(chmod(path, mode) == 0)
        #expect(chown(path, owner, group) == 0)
    }

    private func describe(_ path: String) -> String {
        var info = stat()
        guard lstat(path, &info) == 0 else { return "missing" }
        let type: String
        switch info.st_mode & S_IFMT {
        case S_IFDIR: type = "directory"
        case S_IFLNK: type = "link"
        default: type = "file"
        }
        return "\(type) \(AgentDirectory.describe(info))"
    }

    @Test func aKubeletMadeDirectoryBecomesTheAgentsAndTheAgentAcceptsIt() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let run = base + "/run"
        try makeDirectory(run, mode: 0o755)
        let socket = AgentDirectory.socketDirectory(run, owner: agent, group: socketGroup)
        #expect(try socket.prepare() == .changed(from: "0755 0:0"))
        #expect(describe(run) == "directory 2750 10100:10200")
        // Safe to run again: nothing left to change.
        #expect(try socket.prepare() == .unchanged)
        #expect(describe(run) == "directory 2750 10100:10200")
        // The agent, as uid 10100, takes it for its socket.
        try SocketPath.secureDirectory(run, uid: agent)

        let state = base + "/state"
        try makeDirectory(state, mode: 0o755)
        #expect(
            try AgentDirectory.stateDirectory(state, owner: agent, group: agentGroup).prepare()
                == .changed(from: "0755 0:0")
        )
        #expect(describe(state) == "directory 0700 10100:10100")
    }

    @Test func aMissingDirectoryIsCreatedAndAWrongModeOrGroupIsPutRight() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        // A missing directory, and missing ones above it (those root's, 0755, as the agent makes them).
        let state = AgentDirectory.stateDirectory(base + "/a/state", owner: agent, group: agentGroup)
        let created = try state.prepare()
        #expect(created == .created)
        #expect(describe(base + "/a/state") == "directory 0700 10100:10100")
        #expect(describe(base + "/a") == "directory 0755 0:0")

        // The agent's own directory with another mode and group; the set-group-ID bit where it
        // does not belong goes too.
        let socket = base + "/run"
        try makeDirectory(socket, mode: 0o2777, owner: agent, group: agentGroup)
        let changed = try AgentDirectory.socketDirectory(socket, owner: agent, group: socketGroup).prepare()
        #expect(changed == .changed(from: "2777 10100:10100"))
        #expect(describe(socket) == "directory 2750 10100:10200")
        #expect(chmod(base + "/a/state", 0o2770) == 0)
        #expect(try state.prepare() == .changed(from: "2770 10100:10100"))
        #expect(describe(base + "/a/state") == "directory 0700 10100:10100")
    }

    @Test func aSymbolicLinkOrAFileIsRefusedAndWhatItNamesIsLeftAlone() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let target = base + "/target"
        try makeDirectory(target, mode: 0o755)
        let link = base + "/run"
        #expect(symlink(target, link) == 0)
        let linked = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.socketDirectory(link, owner: agent, group: socketGroup).prepare()
        }
        #expect(linked?.description == "socket directory \(link) is a symbolic link; refusing to use it")
        #expect(describe(link) == "link 0777 0:0")
        #expect(describe(target) == "directory 0755 0:0", "the link's target is left as it was")

        let file = base + "/file"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        chmod(file, 0o644)
        let notDirectory = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(file, owner: agent, group: agentGroup).prepare()
        }
        #expect(notDirectory?.description == "state directory \(file) is not a directory; refusing to use it")
        #expect(describe(file) == "file 0644 0:0")
    }

    @Test func aDirectoryAnotherUidOwnsIsRefused() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let theirs = base + "/state"
        try makeDirectory(theirs, mode: 0o700, owner: stranger, group: stranger)
        let refused = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(theirs, owner: agent, group: agentGroup).prepare()
        }
        #expect(
            refused?.description
                == "state directory \(theirs) is owned by uid 4242 (not root or the agent's uid 10100); refusing to use it"
        )
        #expect(describe(theirs) == "directory 0700 4242:4242")
    }

    @Test func aDirectoryAboveThatTheAgentWouldRefuseIsRefused() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        // Writable by its group: someone else could swap the directory for another.
        let open = base + "/open"
        try makeDirectory(open, mode: 0o775)
        let inOpen = AgentDirectory.socketDirectory(open + "/run", owner: agent, group: socketGroup)
        let writable = #expect(throws: SocketPath.Problem.self) { try inOpen.prepare() }
        #expect(
            writable?.description
                == "socket directory \(open)/run: \(open) is writable by group or others (mode 0775); refusing to use it"
        )
        #expect(describe(open + "/run") == "missing", "nothing is made in it")

        // Owned by another uid.
        let theirs = base + "/theirs"
        try makeDirectory(theirs, mode: 0o755, owner: stranger, group: stranger)
        try makeDirectory(theirs + "/run", mode: 0o755)
        let owned = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.socketDirectory(theirs + "/run", owner: agent, group: socketGroup).prepare()
        }
        #expect(owned?.description.contains("\(theirs)/run: \(theirs) is owned by uid 4242") == true)
        #expect(describe(theirs + "/run") == "directory 0755 0:0")

        // A link above owned by another uid; then one of root's: run as root, no link is followed.
        let real = base + "/real"
        try makeDirectory(real, mode: 0o755)
        #expect(symlink(real, base + "/their-link") == 0)
        #expect(lchown(base + "/their-link", stranger, stranger) == 0)
        let theirLink = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(base + "/their-link/state", owner: agent, group: agentGroup).prepare()
        }
        #expect(theirLink?.description.contains("is a symbolic link owned by uid 4242") == true)
        #expect(describe(real + "/state") == "missing")
        #expect(symlink(real, base + "/root-link") == 0)
        let rootLink = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(base + "/root-link/state", owner: agent, group: agentGroup).prepare()
        }
        #expect(
            rootLink?.description
                == "state directory \(base)/root-link/state: \(base)/root-link is a symbolic link: run as root, "
                + "prepare-directories follows none; refusing to use it"
        )
        #expect(describe(real + "/state") == "missing")

        // Sticky and writable by all, as /tmp: used.
        let sticky = base + "/sticky"
        try makeDirectory(sticky, mode: 0o1777)
        #expect(
            try AgentDirectory.socketDirectory(sticky + "/run", owner: agent, group: socketGroup).prepare() == .created
        )
        #expect(describe(sticky + "/run") == "directory 2750 10100:10200")
    }

    /// Issue 46, item 3: the agent's uid owns a directory on the way, and puts in it a link to a
    /// directory of root's, or root's directory itself (renamed there): run as root, the step must
    /// not give root's directory to the agent. Every directory above the one prepared must be
    /// root's, and no link is followed.
    @Test func aWayTheAgentsUidCouldSwapNeverGivesItRootsDirectory() throws {
        let base = try makeBase()
        defer { try? FileManager.default.removeItem(atPath: base) }
        let theirs = base + "/A"
        try makeDirectory(theirs, mode: 0o755, owner: agent, group: agentGroup)
        let root = base + "/R"
        try makeDirectory(root, mode: 0o755)
        try makeDirectory(root + "/state", mode: 0o700)
        #expect(FileManager.default.createFile(atPath: root + "/state/secret", contents: Data("root's".utf8)))
        #expect(chmod(root + "/state/secret", 0o600) == 0)
        #expect(symlink(root, theirs + "/hop") == 0)
        #expect(lchown(theirs + "/hop", agent, agentGroup) == 0)
        let through = #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(theirs + "/hop/state", owner: agent, group: agentGroup).prepare()
        }
        #expect(
            through?.description
                == "state directory \(theirs)/hop/state: \(theirs) is owned by uid 10100, not root: run as root, "
                + "prepare-directories passes only through root's directories (another uid could swap what is in "
                + "it); refusing to use it"
        )
        #expect(describe(root + "/state") == "directory 0700 0:0")
        #expect(describe(root + "/state/secret") == "file 0600 0:0")

        // Root's directory in the agent's: the agent's uid could have renamed it there.
        try makeDirectory(theirs + "/state", mode: 0o700)
        #expect(throws: SocketPath.Problem.self) {
            try AgentDirectory.stateDirectory(theirs + "/state", owner: agent, group: agentGroup).prepare()
        }
        #expect(describe(theirs + "/state") == "directory 0700 0:0")
    }
}
