import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Runs `fleet-tokend serve` on `socket` where it should refuse to start. An agent that starts
/// instead is stopped after 20 s (status 124).
private func serveExpectingRefusal(_ socket: String) async throws -> (status: Int32, stderr: String) {
    let result = try await run(
        which("timeout") ?? "/usr/bin/timeout",
        ["20", AgentProcess.binary, "serve", "--demo", "--socket", socket]
    )
    return (result.status, result.stderr)
}

/// A new directory `name` in `parent`, with `mode` set exactly (whatever the umask).
private func makeDirectory(_ name: String, in parent: String, mode: mode_t) throws -> String {
    let path = parent + "/" + name
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
    chmod(path, mode)
    return path
}

private func status(_ path: String) -> stat {
    var info = stat()
    lstat(path, &info)
    return info
}

/// The socket directory checks of issue 19: a directory that another user owns or may write, or
/// that such a user can swap, is refused before the agent binds anything in it.
@Suite("Socket directory safety")
struct SocketPathSafetyTests {
    @Test func socketDirectoryWritableByGroupOrOthersIsRefused() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        for mode: mode_t in [0o777, 0o770, 0o1777] {
            let directory = try makeDirectory("m\(String(mode, radix: 8))", in: base, mode: mode)
            let result = try await serveExpectingRefusal(directory + "/tokens.sock")
            #expect(result.status == 1, "mode \(String(mode, radix: 8)): \(result.stderr)")
            let expected =
                "socket directory \(directory) is writable by group or others (mode 0\(String(mode, radix: 8)));"
                + " refusing to use it"
            #expect(result.stderr.contains(expected), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/tokens.sock"))
        }
    }

    @Test func directoryAboveWritableByOthersIsRefusedUnlessSticky() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        let open = try makeDirectory("open", in: base, mode: 0o777)
        let inside = try makeDirectory("inside", in: open, mode: 0o755)
        let result = try await serveExpectingRefusal(inside + "/tokens.sock")
        #expect(result.status == 1)
        #expect(
            result.stderr.contains(
                "socket directory \(inside): \(open) is writable by group or others (mode 0777); refusing to use it"
            ),
            "\(result.stderr)"
        )

        // With the sticky bit (as /tmp) no one else can rename or remove what root owns in it.
        let sticky = try makeDirectory("sticky", in: base, mode: 0o1777)
        let safe = try makeDirectory("safe", in: sticky, mode: 0o755)
        let agent = try await AgentProcess(["--demo"], socketPath: safe + "/tokens.sock")
        #expect(try await agent.send("PING") == ["PONG"])
        #expect(await agent.stop() == 0)
    }

    @Test func missingDirectoriesAreCreatedOwnedByTheAgentWithMode0755() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        let socket = base + "/a/b/tokens.sock"
        // umask 000 would leave a directory made with mkdir's usual 0777 open to everyone.
        let agent = try await AgentProcess(
            ["--demo"],
            socketPath: socket,
            launcher: ["/bin/sh", "-c", #"umask 000; exec "$0" "$@""#]
        )
        #expect(try await agent.send("PING") == ["PONG"])
        for directory in [base + "/a", base + "/a/b"] {
            let info = status(directory)
            #expect(info.st_mode & S_IFMT == S_IFDIR, "\(directory)")
            #expect(info.st_mode & 0o7777 == 0o755, "\(directory): \(String(info.st_mode & 0o7777, radix: 8))")
            #expect(info.st_uid == geteuid(), "\(directory)")
        }
        #expect(status(socket).st_mode & 0o7777 == 0o660)
        #expect(await agent.stop() == 0)

        // An existing directory of the agent's own, 0700 or 0755, is used as it is.
        for mode: mode_t in [0o700, 0o755] {
            let own = try makeDirectory("own\(String(mode, radix: 8))", in: base, mode: mode)
            let again = try await AgentProcess(["--demo"], socketPath: own + "/tokens.sock")
            #expect(try await again.send("PING") == ["PONG"])
            #expect(await again.stop() == 0)
            #expect(status(own).st_mode & 0o7777 == mode)
        }
    }
}

/// The same checks against directories and links that other real users own.
@Suite(
    "Socket directory safety with real users",
    .enabled(if: TestUsers.available && which("timeout") != nil, "needs root, useradd, runuser, socat and timeout")
)
struct SocketPathOwnershipTests {
    private var otherUID: uid_t { getpwnam(TestUsers.other)!.pointee.pw_uid }
    private var otherGID: gid_t { getpwnam(TestUsers.other)!.pointee.pw_gid }

    @Test func directoryOwnedByAnotherUserIsRefused() async throws {
        try await TestUsers.ensure()
        let base = try AgentProcess.makeTemporaryDirectory().path
        let theirs = try makeDirectory("theirs", in: base, mode: 0o755)
        #expect(chown(theirs, otherUID, otherGID) == 0)
        let result = try await serveExpectingRefusal(theirs + "/tokens.sock")
        #expect(result.status == 1)
        #expect(
            result.stderr.contains(
                "socket directory \(theirs) is owned by uid \(otherUID) (not root, the agent's uid); refusing to use it"
            ),
            "\(result.stderr)"
        )
        #expect(!FileManager.default.fileExists(atPath: theirs + "/tokens.sock"))

        // Their directory higher up: they could rename the root-owned one below and put another.
        let below = try makeDirectory("below", in: theirs, mode: 0o755)
        let deeper = try await serveExpectingRefusal(below + "/tokens.sock")
        #expect(deeper.status == 1)
        #expect(
            deeper.stderr.contains("socket directory \(below): \(theirs) is owned by uid \(otherUID)"),
            "\(deeper.stderr)"
        )
    }

    @Test func symlinkedSocketDirectoryIsRefusedUnlessRootOwnsTheLinkAndItsTarget() async throws {
        try await TestUsers.ensure()
        let base = try AgentProcess.makeTemporaryDirectory().path
        let real = try makeDirectory("real", in: base, mode: 0o755)
        let link = base + "/link"
        #expect(symlink(real, link) == 0)
        #expect(lchown(link, otherUID, otherGID) == 0)
        let result = try await serveExpectingRefusal(link + "/tokens.sock")
        #expect(result.status == 1)
        #expect(
            result.stderr.contains(
                "socket directory \(link) is a symbolic link owned by uid \(otherUID) (not root, the agent's uid);"
                    + " refusing to use it"
            ),
            "\(result.stderr)"
        )
        #expect(!FileManager.default.fileExists(atPath: real + "/tokens.sock"))

        // A link of root's own to another user's directory: the target is checked as well.
        let theirs = try makeDirectory("theirs", in: base, mode: 0o755)
        #expect(chown(theirs, otherUID, otherGID) == 0)
        let rootLink = base + "/root-link"
        #expect(symlink(theirs, rootLink) == 0)
        let target = try await serveExpectingRefusal(rootLink + "/tokens.sock")
        #expect(target.status == 1)
        #expect(
            target.stderr.contains("socket directory \(rootLink): \(theirs) is owned by uid \(otherUID)"),
            "\(target.stderr)"
        )

        // A link root owns to a directory root owns is followed.
        let good = base + "/good-link"
        #expect(symlink(real, good) == 0)
        let agent = try await AgentProcess(["--demo"], socketPath: good + "/tokens.sock")
        #expect(try await agent.send("PING") == ["PONG"])
        #expect(await agent.stop() == 0)
    }

    /// The README's demo as a user who is not root: someone else made the directory first.
    @Test func agentOfAnotherUserRefusesADirectoryMadeFirstBySomeoneElse() async throws {
        try await TestUsers.ensure()
        let member = getpwnam(TestUsers.member)!.pointee
        let binary = try await sharedBinary()
        // A /tmp of its own: world-writable with the sticky bit.
        let tmp = try makeDirectory("tmp", in: try AgentProcess.makeTemporaryDirectory().path, mode: 0o1777)
        let planted = try makeDirectory("fleet-tokend-\(otherUID)", in: tmp, mode: 0o777)
        #expect(chown(planted, member.pw_uid, member.pw_gid) == 0)
        let result = try await run(
            which("runuser")!,
            [
                "-u", TestUsers.other, "--", which("timeout")!, "20", binary, "serve", "--demo", "--socket",
                planted + "/tokens.sock",
            ]
        )
        #expect(result.status == 1)
        #expect(
            result.stderr.contains(
                "socket directory \(planted) is owned by uid \(member.pw_uid) (not root or the agent's uid \(otherUID));"
                    + " refusing to use it"
            ),
            "\(result.stderr)"
        )
        #expect(!FileManager.default.fileExists(atPath: planted + "/tokens.sock"))

        // Where no one made it first, the user's agent makes it, owned by the user, and serves.
        let fresh = tmp + "/fleet-tokend-\(otherUID)-fresh"
        // The launcher gets the usual binary as $0 and runs the shared copy as the user instead.
        let agent = try await AgentProcess(
            ["--demo"],
            socketPath: fresh + "/tokens.sock",
            environment: ["RUNUSER": which("runuser")!, "AS": TestUsers.other, "BINARY": binary],
            launcher: ["/bin/sh", "-c", #"exec "$RUNUSER" -u "$AS" -- "$BINARY" "$@""#]
        )
        #expect(try await agent.send("PING") == ["PONG"])
        #expect(status(fresh).st_uid == otherUID)
        #expect(status(fresh).st_mode & 0o7777 == 0o755)
        #expect(status(fresh + "/tokens.sock").st_uid == otherUID)
        await agent.stop()
    }

    /// The agent binary, or a copy of it when the test user may not run it where it was built.
    private func sharedBinary() async throws -> String {
        let check = try await run(which("runuser")!, ["-u", TestUsers.other, "--", "test", "-x", AgentProcess.binary])
        if check.status == 0 { return AgentProcess.binary }
        let path = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("fleet-tokend").path
        // Copied by `cp`, not in this process: a child another test forks meanwhile would inherit
        // our descriptor open for writing, and exec'ing the copy would fail with ETXTBSY ("Text
        // file busy") while it lived. Once `cp` has exited, nobody holds the copy open to write.
        let copy = try await run(which("cp")!, [AgentProcess.binary, path])
        try #require(copy.status == 0, "cp: \(copy.stderr)")
        chmod(path, 0o755)
        return path
    }
}
