import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Where the cache file may be, against the real agent (issue 46, items 6, 7 and 9): never in the
/// socket's directory however the path names it, never in the place of a device, FIFO or socket,
/// and never shared by two agents. Each is refused at start (exit 78, naming `cache_file`), by
/// `check-config` too, with nothing written.
@Suite("Cache file: where it may be")
struct CacheFilePlacementTests {
    /// `serve` with `arguments`, expected to stop at start; one that serves instead is stopped
    /// after 20 s (status 124).
    private func serveExpectingRefusal(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let result = try await run(
            which("timeout") ?? "/usr/bin/timeout",
            ["20", AgentProcess.binary, "serve"] + arguments
        )
        return (result.status, result.stderr)
    }

    /// `check-config` with `arguments`.
    private func checkConfig(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run(AgentProcess.binary, ["check-config"] + arguments)
    }

    /// Item 6: the socket's directory named another way (`//`, `/./`, `/sub/../`, a link to it, a
    /// directory still to be made) is the socket's directory: the agent compares directories by
    /// device and inode, not by the paths' text.
    @Test func theSocketsDirectoryUnderAnotherNameIsRefused() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let sockets = setup.directory + "/run"
        try FileManager.default.createDirectory(atPath: sockets, withIntermediateDirectories: false)
        #expect(chmod(sockets, 0o755) == 0)
        // The test's uid's: root's when the suite runs as root, as the review made it.
        #expect(symlink(sockets, setup.directory + "/link") == 0)
        let socket = sockets + "/tokens.sock"
        let cases = [
            (socket, sockets + "//tokens.cache"), (socket, sockets + "/./tokens.cache"),
            (socket, sockets + "/sub/../tokens.cache"), (socket, setup.directory + "/link/tokens.cache"),
            // Neither directory exists yet: the same names below the same directory.
            (setup.directory + "/later/tokens.sock", setup.directory + "/later/./tokens.cache"),
        ]
        for (socket, cache) in cases {
            let flags = ["--demo", "--socket", socket, "--cache-file", cache]
            let checked = try await checkConfig(flags)
            #expect(checked.status == 78, "\(cache): \(checked)")
            #expect(
                checked.stderr.contains("configuration key cache_file: \(cache) is in the socket's directory"),
                "\(checked.stderr)"
            )
            let served = try await serveExpectingRefusal(flags)
            #expect(served.status == 78, "\(cache): \(served.stderr)")
            #expect(served.stderr.contains("which workers can reach"), "\(served.stderr)")
            let left = (try? FileManager.default.contentsOfDirectory(atPath: sockets)) ?? []
            #expect(left.isEmpty, "\(cache): nothing written in the socket's directory: \(left)")
            #expect(!FileManager.default.fileExists(atPath: setup.directory + "/later"), "nothing created")
        }
    }

    /// Item 7: a FIFO, a socket, a directory or (as root) a character device at the path stops
    /// the start, which would otherwise have renamed its file over it; check-config says so too,
    /// `/dev/null` included (devtmpfs calls itself tmpfs).
    @Test func aDeviceFIFOOrSocketInTheFilesPlaceStopsTheStart() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        var cases: [(String, () -> Int32)] = [
            ("a FIFO", { mkfifo(setup.path, 0o600) }),
            ("a socket", { mknod(setup.path, S_IFSOCK | 0o600, 0) }),
            ("a directory", { mkdir(setup.path, 0o700) }),
        ]
        // makedev(1, 3): /dev/null's numbers.
        if geteuid() == 0 { cases.append(("a character device", { mknod(setup.path, S_IFCHR | 0o600, 0x103) })) }
        for (what, make) in cases {
            try? FileManager.default.removeItem(atPath: setup.path)
            guard make() == 0 else {
                // A container may deny even root CAP_MKNOD.
                if what != "a character device" {
                    Issue.record("cannot make \(what): \(String(cString: strerror(errno)))")
                }
                continue
            }
            let before = try #require(setup.status())
            let flags = ["--demo", "--socket", setup.directory + "/s/t.sock", "--cache-file", setup.path]
            let served = try await serveExpectingRefusal(flags)
            #expect(served.status == 78, "\(what): \(served.stderr)")
            #expect(
                served.stderr.contains(
                    "configuration key cache_file: \(setup.path) is \(what), not a regular file: each write of the "
                        + "cache would replace it"
                ),
                "\(served.stderr)"
            )
            let after = try #require(setup.status())
            #expect(after.st_mode == before.st_mode && after.st_ino == before.st_ino, "\(what) is left as it was")
            #expect(!FileManager.default.fileExists(atPath: setup.path + ".tmp"))
            let checked = try await checkConfig(flags)
            #expect(checked.status == 78, "\(what): \(checked)")
        }
        let null = try await checkConfig(["--demo", "--cache-file", "/dev/null"])
        #expect(null.status == 78, "\(null)")
        #expect(
            null.stderr.contains("configuration key cache_file: /dev/null is a character device, not a regular file"),
            "\(null.stderr)"
        )
    }

    /// Item 9: a second agent on the same file is refused at start (exit 78), saying another
    /// agent uses it: the two wrote through one `<file>.tmp` and could publish each other's
    /// half-written file. The lock goes with the first agent's process, `kill -9` included.
    @Test func aSecondAgentOnTheSameFileIsRefusedUntilTheFirstIsGone() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let first = try await AgentProcess(setup.arguments(provider, interval: 1))
        defer { try? FileManager.default.removeItem(at: first.directory) }
        _ = try #require(tokenOf(try await first.send("GET vehicle l-1").first))

        let elsewhere = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: elsewhere) }
        let second = try await serveExpectingRefusal(
            setup.arguments(provider) + ["--socket", elsewhere.appendingPathComponent("t.sock").path]
        )
        #expect(second.status == 78, "\(second.stderr)")
        #expect(
            second.stderr.contains(
                "configuration key cache_file: another agent uses \(setup.path) (pid \(first.pid)): it holds "
                    + "\(setup.path).lock"
            ),
            "\(second.stderr)"
        )
        #expect(try await first.send("PING") == ["PONG"], "the first agent goes on")
        // check-config names the agent that holds the file, without touching its lock.
        let checked = try await checkConfig(setup.arguments(provider))
        #expect(checked.status == 0, "\(checked)")
        #expect(
            checked.stdout.contains("in use by a running agent (pid \(first.pid), holding \(setup.path).lock)"),
            "\(checked.stdout)"
        )
        #expect(try await eventually { (try await first.stats())["snapshot_tokens"] == 1 })

        kill(first.pid, SIGKILL)
        await first.stop()
        let third = try await AgentProcess(setup.arguments(provider))
        defer { try? FileManager.default.removeItem(at: third.directory) }
        // The lock went with the first agent: the one that holds it now is named.
        let again = try await checkConfig(setup.arguments(provider))
        #expect(again.stdout.contains("in use by a running agent (pid \(third.pid),"), "\(again.stdout)")
        #expect(logField(third.log, "cache taken over", "tokens") == "1", "\(third.log)")
        #expect(await third.stop() == 0)
    }
}
