import Foundation
import TestSupport
import Testing
import TokenWire

@testable import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// Setting the mode and group of the socket the agent bound: never through a symbolic link or on
/// anything but that socket (issue 19: a swapped socket made a root-owned 0600 file 0666). And the
/// walk to the socket's directory (its ownership rules are tested against the real agent in
/// SocketPathSafetyTests).
@Suite("Socket path: mode, group and directory walk")
struct SocketPathTests {
    private func makeDirectory() throws -> String {
        let path = TestTemporary.path("ftd-sp")
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        return path
    }

    private func status(_ path: String) -> stat {
        var info = stat()
        lstat(path, &info)
        return info
    }

    /// A group other than the one `info` names, so that a change would show.
    private func otherGroup(than info: stat) -> gid_t {
        info.st_gid == 4242 ? 4243 : 4242
    }

    /// Binds a Unix stream socket at `path` and returns its descriptor.
    private func bindSocket(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let result = UnixSocketAddress.with(path: path) { address, length in bind(fd, address, length) }
        guard fd >= 0, result == 0 else { throw SocketPath.Problem(description: "cannot bind \(path)") }
        return fd
    }

    @Test func modeAndGroupNeverFollowASymbolicLinkAndTheBoundSocketGetsThem() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let secret = directory + "/secret"
        #expect(FileManager.default.createFile(atPath: secret, contents: Data("root only".utf8)))
        chmod(secret, 0o600)
        let before = status(secret)
        let socketPath = directory + "/tokens.sock"
        // The swap: where the agent bound its socket there is now a link to the secret file.
        #expect(symlink(secret, socketPath) == 0)
        let group = otherGroup(than: before)

        let error = #expect(throws: SocketPath.Problem.self) {
            try SocketPath.setModeAndGroup(of: socketPath, mode: 0o666, group: group)
        }
        #expect(
            error?.description
                == "\(socketPath) is a symbolic link, not the socket the agent bound; refusing to set its mode or group"
        )
        let after = status(secret)
        #expect(after.st_mode & 0o7777 == 0o600, "the file behind the link keeps its mode")
        #expect(after.st_gid == before.st_gid, "the file behind the link keeps its group")
        #expect(after.st_uid == before.st_uid)

        // The socket it did bind gets exactly the mode and the group.
        unlink(socketPath)
        let fd = try bindSocket(at: socketPath)
        defer { close(fd) }
        let failure = try SocketPath.setModeAndGroup(of: socketPath, mode: 0o640, group: group)
        let bound = status(socketPath)
        #expect(bound.st_mode & S_IFMT == S_IFSOCK)
        #expect(bound.st_mode & 0o7777 == 0o640)
        if getuid() == 0 {
            #expect(failure == nil)
            #expect(bound.st_gid == group)
        }
    }

    @Test func aFileOrAnotherOwnersSocketAtThePathIsLeftAlone() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/tokens.sock"
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        chmod(file, 0o600)
        let fileBefore = status(file)
        let notSocket = #expect(throws: SocketPath.Problem.self) {
            try SocketPath.setModeAndGroup(of: file, mode: 0o666, group: otherGroup(than: fileBefore))
        }
        #expect(notSocket?.description.contains("is a regular file, not the socket the agent bound") == true)
        #expect(status(file).st_mode & 0o7777 == 0o600)
        #expect(status(file).st_gid == fileBefore.st_gid)

        unlink(file)
        let fd = try bindSocket(at: file)
        defer { close(fd) }
        chmod(file, 0o600)
        let socketBefore = status(file)
        let stranger = socketBefore.st_uid == 4242 ? uid_t(4243) : uid_t(4242)
        let foreign = #expect(throws: SocketPath.Problem.self) {
            try SocketPath.setModeAndGroup(
                of: file,
                mode: 0o666,
                group: otherGroup(than: socketBefore),
                uid: stranger
            )
        }
        #expect(foreign?.description.contains("is a socket owned by uid \(socketBefore.st_uid)") == true)
        #expect(status(file).st_mode & 0o7777 == 0o600)
        #expect(status(file).st_gid == socketBefore.st_gid)
    }

    @Test func directoryWalkRefusesLinkLoopsAndFilesOnTheWay() throws {
        let directory = try makeDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(symlink(directory + "/b", directory + "/a") == 0)
        #expect(symlink(directory + "/a", directory + "/b") == 0)
        let loop = #expect(throws: SocketPath.Problem.self) { try SocketPath.prepare(directory + "/a/tokens.sock") }
        #expect(loop?.description.contains("has too many levels of symbolic links") == true)

        #expect(FileManager.default.createFile(atPath: directory + "/file", contents: Data()))
        let file = #expect(throws: SocketPath.Problem.self) { try SocketPath.prepare(directory + "/file/tokens.sock") }
        #expect(
            file?.description
                == "socket directory \(directory)/file is not a directory; refusing to use it"
        )

        // "..", "." and a missing directory on the way are resolved as the kernel would.
        try SocketPath.prepare(directory + "/new/../other/./tokens.sock")
        #expect(status(directory + "/new").st_mode & S_IFMT == S_IFDIR)
        #expect(status(directory + "/other").st_mode & 0o7777 == 0o755)
    }

    /// The directory a socket goes in, from its path as given: a bare name, even of one
    /// character, is in `.`.
    @Test func socketDirectoryOfAPath() {
        let cases: [(String, String)] = [
            ("/run/fleet-tokend/tokens.sock", "/run/fleet-tokend"), ("/tokens.sock", "/"), ("tokens.sock", "."),
            ("s", "."), ("s/", "."), ("a/s", "a"), ("./s", "."), ("../s", ".."), ("/run//a/s/", "/run/a"),
            ("//s", "/"), ("/", "/"), ("", "."), ("/é/ü.sock", "/é"),
        ]
        for (path, directory) in cases {
            #expect(SocketPath.directory(of: path) == directory, "\(path)")
        }
    }
}
