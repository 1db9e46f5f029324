import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `fleet-tokend prepare-directories`, the Kubernetes init container's step, run as daemonset.yaml
/// runs it: as root with only `CAP_CHOWN` (setpriv leaves the binary no other capability), on
/// directories made as the kubelet makes a hostPath (`0755 root:root`).
@Suite(
    "prepare-directories",
    .enabled(if: getuid() == 0 && which("setpriv") != nil, "needs root (chown to other uids) and setpriv")
)
struct PrepareDirectoriesTests {
    /// The binary with `capabilities` alone (e.g. `["chown"]`, or none), no privilege escalation.
    private func prepare(_ arguments: [String], capabilities: [String] = ["chown"]) async throws -> (
        status: Int32, stdout: String, stderr: String
    ) {
        let bounding = (["-all"] + capabilities.map { "+" + $0 }).joined(separator: ",")
        return try await run(
            which("setpriv")!,
            [
                "--bounding-set=\(bounding)", "--inh-caps=-all", "--no-new-privs", "--", AgentProcess.binary,
                "prepare-directories",
            ] + arguments
        )
    }

    private func hostPath(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false)
        #expect(chmod(path, 0o755) == 0)
    }

    private func status(_ path: String) -> String {
        var info = stat()
        guard lstat(path, &info) == 0 else { return "missing" }
        let kind = info.st_mode & S_IFMT == S_IFDIR ? "d" : info.st_mode & S_IFMT == S_IFLNK ? "l" : "f"
        return "\(kind) \(String(info.st_mode & 0o7777, radix: 8)) \(info.st_uid):\(info.st_gid)"
    }

    private func arguments(_ base: String) -> [String] {
        [
            "--user=10100", "--group=10100", "--socket-directory=\(base)/run", "--socket-group=10200",
            "--state-directory=\(base)/state",
        ]
    }

    @Test func withOnlyCapChownBothDirectoriesBecomeTheAgentsTwice() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        try hostPath(base + "/state")
        let first = try await prepare(arguments(base))
        #expect(first.status == 0, "\(first)")
        #expect(
            first.stdout == """
                socket directory \(base)/run: was 0755 0:0, now 2750 10100:10200
                state directory \(base)/state: was 0755 0:0, now 0700 10100:10100

                """
        )
        #expect(first.stderr.isEmpty, "\(first.stderr)")
        #expect(status(base + "/run") == "d 2750 10100:10200")
        #expect(status(base + "/state") == "d 700 10100:10100")

        let again = try await prepare(arguments(base))
        #expect(again.status == 0, "\(again)")
        #expect(
            again.stdout == """
                socket directory \(base)/run: already 2750 10100:10200
                state directory \(base)/state: already 0700 10100:10100

                """
        )
        #expect(status(base + "/run") == "d 2750 10100:10200")

        // A state directory put wrong since (the agent's, with group bits): put right, still with
        // CAP_CHOWN alone, though root now owns neither directory and may not even enter them.
        #expect(chmod(base + "/state", 0o2770) == 0)
        let fixed = try await prepare(arguments(base))
        #expect(fixed.status == 0, "\(fixed)")
        #expect(fixed.stdout.contains("state directory \(base)/state: was 2770 10100:10100, now 0700 10100:10100\n"))
        #expect(status(base + "/state") == "d 700 10100:10100")

        // Missing directories are made.
        let fresh = try await prepare([
            "--user=10100", "--group=10100", "--socket-directory=\(base)/new/run", "--socket-group=10200",
        ])
        #expect(fresh.status == 0, "\(fresh)")
        #expect(fresh.stdout == "socket directory \(base)/new/run: created, 2750 10100:10200\n")
        #expect(status(base + "/new/run") == "d 2750 10100:10200")
    }

    @Test func withoutCapChownItFailsSayingWhy() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        try hostPath(base + "/state")
        let result = try await prepare(arguments(base), capabilities: [])
        #expect(result.status == 1, "\(result)")
        #expect(
            result.stderr.contains(
                "fleet-tokend: cannot give socket directory \(base)/run to 10100:10200: Operation not permitted"
                    + " (it takes root with CAP_CHOWN)\n"
            ),
            "\(result.stderr)"
        )
        #expect(
            result.stderr.contains("fleet-tokend: cannot give state directory \(base)/state to 10100:10100: "),
            "\(result.stderr)"
        )
        #expect(status(base + "/run").hasSuffix(" 0:0"), "never given to the agent: \(status(base + "/run"))")
    }

    @Test func aSymbolicLinkIsRefusedAndItsTargetLeftAlone() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        try hostPath(base + "/secret")
        #expect(symlink(base + "/secret", base + "/state") == 0)
        let result = try await prepare(arguments(base))
        #expect(result.status == 1, "\(result)")
        #expect(
            result.stderr
                == "fleet-tokend: state directory \(base)/state is a symbolic link; refusing to use it\n"
        )
        #expect(result.stdout == "socket directory \(base)/run: was 0755 0:0, now 2750 10100:10200\n")
        #expect(status(base + "/state") == "l 777 0:0")
        #expect(status(base + "/secret") == "d 755 0:0")
    }

    /// Issue 46, item 3: the agent's uid owns a directory on the way and links from it to a
    /// directory of root's. With CAP_CHOWN alone the step gave root's directory to the agent;
    /// now it refuses (exit 1), and root's directory and file stay root's.
    @Test func aLinkTheAgentsUidMadeNeverGetsItRootsDirectory() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        try hostPath(base + "/A")
        #expect(chown(base + "/A", 10100, 10100) == 0)
        try hostPath(base + "/R")
        try FileManager.default.createDirectory(atPath: base + "/R/state", withIntermediateDirectories: false)
        #expect(chmod(base + "/R/state", 0o700) == 0)
        #expect(FileManager.default.createFile(atPath: base + "/R/state/secret", contents: Data("root's".utf8)))
        #expect(chmod(base + "/R/state/secret", 0o600) == 0)
        #expect(symlink(base + "/R", base + "/A/hop") == 0)
        #expect(lchown(base + "/A/hop", 10100, 10100) == 0)
        var arguments = arguments(base)
        arguments[arguments.count - 1] = "--state-directory=\(base)/A/hop/state"
        let result = try await prepare(arguments)
        #expect(result.status == 1, "\(result)")
        #expect(
            result.stderr.contains("state directory \(base)/A/hop/state: \(base)/A is owned by uid 10100, not root"),
            "\(result.stderr)"
        )
        #expect(status(base + "/R/state") == "d 700 0:0")
        #expect(status(base + "/R/state/secret") == "f 600 0:0")
    }

    /// Run as full root, a link of root's to the socket directory would have put the state
    /// directory in the one workers mount: no link is followed.
    @Test func asFullRootNoLinkLeadsTheStateDirectoryIntoTheSocketDirectory() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        #expect(symlink(base + "/run", base + "/hop") == 0)
        var arguments = arguments(base)
        arguments[arguments.count - 1] = "--state-directory=\(base)/hop/state"
        let result = try await run(AgentProcess.binary, ["prepare-directories"] + arguments)
        #expect(result.status == 1, "\(result)")
        #expect(
            result.stderr.contains("\(base)/hop is a symbolic link: run as root, prepare-directories follows none"),
            "\(result.stderr)"
        )
        #expect(status(base + "/run/state") == "missing")
    }

    /// Two paths apart in text, one directory on the file system (a bind mount): refused by device
    /// and inode, exit 1, before anything is changed.
    @Test func oneDirectoryUnderTwoPathsIsRefusedBeforeAnythingChanges() async throws {
        let base = try AgentProcess.makeTemporaryDirectory().path
        defer { try? FileManager.default.removeItem(atPath: base) }
        try hostPath(base + "/run")
        try hostPath(base + "/state")
        guard try await run("/bin/mount", ["--bind", base + "/run", base + "/state"]).status == 0 else { return }
        let result: (status: Int32, stdout: String, stderr: String)
        do {
            result = try await prepare(arguments(base))
        } catch {
            _ = try? await run("/bin/umount", [base + "/state"])
            throw error
        }
        _ = try await run("/bin/umount", [base + "/state"])
        #expect(result.status == 1, "\(result)")
        #expect(
            result.stderr.contains(
                "state directory \(base)/state and socket directory \(base)/run are the same directory, or one is "
                    + "in the other, on the file system (by device and inode)"
            ),
            "\(result.stderr)"
        )
        #expect(result.stdout.isEmpty)
        #expect(status(base + "/run") == "d 755 0:0")
    }

    /// Arguments it cannot act on: 64, before touching anything.
    @Test(arguments: [
        (["--user=agent"], "--user"),
        (["--user=4294967295"], "--user 4294967295 is not an id"),
        (["--socket-directory=run"], "run must be an absolute path below /, without . or .. in it"),
        (["--state-directory=/x/../run"], "must be an absolute path below /, without . or .. in it"),
        (["--state-directory=/RUN"], "the state directory must be apart from the socket directory"),
        (["--state-directory=/RUN/state"], "the state directory must be apart from the socket directory"),
        (["--state-directory=/"], "must be an absolute path below /, without . or .. in it"),
    ])
    func badArgumentsAreRefused(replacing: [String], message: String) async throws {
        var arguments = [
            "--user=10100", "--group=10100", "--socket-directory=/RUN", "--socket-group=10200",
            "--state-directory=/STATE",
        ]
        for argument in replacing {
            let name = argument.prefix { $0 != "=" }
            arguments.removeAll { $0.hasPrefix(name + "=") }
            arguments.append(argument)
        }
        let result = try await prepare(arguments)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }
}
