import Foundation
import TestSupport
import Testing
import TokenWire

/// `fleet-tokend check-config`: the whole configuration checked as `serve` and a reload check it,
/// its files read, nothing started.
@Suite("check-config")
struct CheckConfigTests {
    private func write(_ json: String) throws -> String {
        let path = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("config.json").path
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func aGoodConfigurationPrintsWhatItServes() async throws {
        let path = try write(
            #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/v/{id}"}}, "allow": {"vehicle": {"users": [0]}}, "admin": {"groups": [0]}}"#
        )
        let result = try await run(AgentProcess.binary, ["check-config", "--config", path])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("configuration OK: \(path)\nkinds:\n"), "\(result.stdout)")
        #expect(
            result.stdout.contains("  vehicle           http http://127.0.0.1:1/v/ID; allowed: users [0] groups []\n")
        )
        #expect(result.stdout.contains("admin:     users [] groups [0]\n"))
        #expect(!result.stdout.contains("trip"), "only the kinds it serves")
    }

    @Test func theDemoIsNamed() async throws {
        let result = try await run(AgentProcess.binary, ["check-config", "--config", try write(#"{"demo": true}"#)])
        #expect(result.status == 0)
        #expect(result.stdout.contains("demo issuer: Fleet Engine refuses its tokens\n"))
        #expect(result.stdout.contains("  trip "))
    }

    /// Every option `serve` takes, `check-config` takes (one option group), and checks the
    /// configuration `serve` would run with it: a flag's value is checked as the file's key is.
    @Test func everyServeFlagIsACheckConfigFlag() async throws {
        let serve = CommandLineDocsTests.options(inHelp: try await CommandLineDocsTests.help(["serve"]))
        let check = CommandLineDocsTests.options(inHelp: try await CommandLineDocsTests.help(["check-config"]))
        #expect(serve.count > 20)
        #expect(
            serve.subtracting(check).isEmpty,
            "serve flags check-config refuses: \(serve.subtracting(check).sorted())"
        )
        #expect(check.subtracting(serve) == ["--user"])

        let sockets = try AgentProcess.makeTemporaryDirectory()
        defer { TestTemporary.remove(sockets.path) }
        let flags = try await run(
            AgentProcess.binary,
            [
                "check-config", "--provider", "vehicle=http://127.0.0.1:1/v/{id}", "--max-entries", "10",
                "--cache-file", "/dev/shm/ftd-check-\(UUID().uuidString.prefix(8))/tokens.cache",
                "--socket", sockets.path + "/tokens.sock",
            ]
        )
        #expect(flags.status == 0, "\(flags.stderr)")
        #expect(flags.stdout.hasPrefix("configuration OK: (no config file)\nkinds:\n  vehicle "), "\(flags.stdout)")
        #expect(flags.stdout.contains("cache file: /dev/shm/ftd-check-"))
        let bad = try await run(
            AgentProcess.binary,
            ["check-config", "--provider", "vehicle=http://127.0.0.1:1/v/{id}", "--max-entries", "0"]
        )
        #expect(bad.status == 78)
        #expect(bad.stderr == "fleet-tokend: configuration key max_entries: must be at least 1\n", "\(bad.stderr)")
    }

    /// A bad value, a file it names that is not there, a misspelt kind in the rules, nothing to
    /// serve: 78, naming the key, as `serve` and a reload would refuse them.
    @Test(arguments: [
        (#"{"demo": true, "max_entries": 0}"#, "configuration key max_entries: must be at least 1"),
        (
            #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "headers_file": "/nonexistent/h"}}}"#,
            "configuration key providers.vehicle.headers_file: cannot read /nonexistent/h"
        ),
        (#"{"demo": true, "allow": {"vehicles": {"users": [0]}}}"#, "configuration key allow.vehicles:"),
        ("{}", "configuration key providers: nothing to serve"),
        (#"{"demo": true, "demo": false}"#, "configuration key demo: appears twice"),
    ])
    func aBadConfigurationIsRefusedNamingTheKey(json: String, message: String) async throws {
        let result = try await run(AgentProcess.binary, ["check-config", "--config", try write(json)])
        #expect(result.status == 78, "\(result)")
        #expect(result.stderr.hasPrefix("fleet-tokend: \(message)"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    /// A config serving `vehicle` and `trip` from `provider` with its cache file at `path`, and
    /// `extra` keys.
    private func cacheConfig(_ provider: FakeTokenProvider, _ path: String, extra: String = "") throws -> String {
        try write(
            #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}, "#
                + #""trip": {"url": "\#(provider.url(kind: "trip"))"}}, "cache_file": "\#(path)"\#(extra)}"#
        )
    }

    /// The cache file's directory is checked as `serve` checks it at start, with nothing created:
    /// one still to be made is named; a file an agent wrote is read as a start reads it; one the
    /// start would refuse is a warning (a cold start, not a failed one).
    @Test func theCacheFileIsCheckedAsAStartChecksItCreatingNothing() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let uid = geteuid()

        // A directory still to be made, on tmpfs: OK, and still not there afterwards.
        let later = setup.directory + "/later/state"
        let missing = try await run(
            AgentProcess.binary,
            ["check-config", "--config", try cacheConfig(provider, later + "/tokens.cache")]
        )
        #expect(missing.status == 0, "\(missing)")
        #expect(
            missing.stdout.hasSuffix(
                "cache file: \(later)/tokens.cache (checked for uid \(uid))\n"
                    + "  directory \(later) on tmpfs; \(setup.directory)/later does not exist yet: "
                    + "the agent creates it (mode 0700) at start\n"
                    + "  no file yet: the agent starts cold and writes it\n"
            ),
            "\(missing.stdout)"
        )
        #expect(!FileManager.default.fileExists(atPath: setup.directory + "/later"), "nothing created")

        // The file an agent wrote at its stop: read and checked as the next start would.
        _ = try await CacheFileHostileTests.realFile(setup, provider)
        let config = try cacheConfig(provider, setup.path)
        let written = try await run(AgentProcess.binary, ["check-config", "--config", config])
        #expect(written.status == 0, "\(written)")
        #expect(written.stdout.contains("  directory \(setup.directory) on tmpfs\n"), "\(written.stdout)")
        #expect(
            written.stdout.contains("  holds 2 tokens (format 3, written by \(FleetTokendVersion.version)); "),
            "\(written.stdout)"
        )

        // A file the start would refuse: a warning, exit 0.
        try FileManager.default.setAttributes([.posixPermissions: 0o640], ofItemAtPath: setup.path)
        let loose = try await run(AgentProcess.binary, ["check-config", "--config", config])
        #expect(loose.status == 0, "\(loose)")
        #expect(
            loose.stdout.contains(
                "warning: the cache file has mode 0640: group or others may use it (0600 is written): "
                    + "the agent would refuse it and start cold\n"
            ),
            "\(loose.stdout)"
        )
    }

    /// A directory the start refuses (group-writable; on a disk without `cache_file_on_disk`)
    /// fails check-config with the message `serve` stops with, exit 78, and nothing is created.
    @Test func aCacheDirectoryTheStartRefusesFailsWithTheStartsMessage() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        try FileManager.default.setAttributes([.posixPermissions: 0o770], ofItemAtPath: setup.directory)
        var configs = [try cacheConfig(provider, setup.path)]
        let disk = try AgentProcess.makeTemporaryDirectory()  // /tmp: a disk here, or tmpfs elsewhere
        defer { try? FileManager.default.removeItem(at: disk) }
        let type = try await run("/usr/bin/stat", ["-f", "-c", "%t", disk.path])
        let onDisk = !["1021994", "858458f6"].contains(type.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let diskFile = disk.appendingPathComponent("tokens.cache").path
        if onDisk { configs.append(try cacheConfig(provider, diskFile)) }
        let sockets = try AgentProcess.makeTemporaryDirectory()
        defer { try? FileManager.default.removeItem(at: sockets) }
        for config in configs {
            let checked = try await run(AgentProcess.binary, ["check-config", "--config", config])
            #expect(checked.status == 78, "\(checked)")
            #expect(checked.stdout.isEmpty)
            #expect(checked.stderr.hasPrefix("fleet-tokend: configuration key cache_file: "), "\(checked.stderr)")
            let socket = sockets.appendingPathComponent("check.sock").path
            let served = try await run(AgentProcess.binary, ["serve", "--config", config, "--socket", socket])
            #expect(served.status == 78, "\(served)")
            #expect(served.stderr.hasSuffix(checked.stderr), "serve: \(served.stderr)\ncheck-config: \(checked.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: setup.path))
        if onDisk {
            let allowed = try await run(
                AgentProcess.binary,
                [
                    "check-config", "--config",
                    try cacheConfig(provider, diskFile, extra: #", "cache_file_on_disk": true"#),
                ]
            )
            #expect(allowed.status == 0, "\(allowed)")
            #expect(
                allowed.stdout.contains(", not memory-backed: allowed by cache_file_on_disk\n"),
                "\(allowed.stdout)"
            )
        }
    }

    /// `--user` checks the directory for the agent's uid rather than the caller's: a directory of
    /// uid 4242's passes for it and is refused for root (run as root only: it needs chown).
    @Test(.enabled(if: geteuid() == 0)) func theCacheDirectoryIsCheckedForTheAgentsUid() async throws {
        let setup = try CacheFileSetup()
        defer { setup.remove() }
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        #expect(chown(setup.directory, 4242, 4242) == 0)
        let config = try cacheConfig(provider, setup.path)
        let agents = try await run(AgentProcess.binary, ["check-config", "--config", config, "--user", "4242"])
        #expect(agents.status == 0, "\(agents)")
        #expect(agents.stdout.contains("(checked for uid 4242)\n"), "\(agents.stdout)")
        let roots = try await run(AgentProcess.binary, ["check-config", "--config", config])
        #expect(roots.status == 78, "\(roots)")
        #expect(
            roots.stderr
                == "fleet-tokend: configuration key cache_file: cache file directory \(setup.directory) is owned by "
                + "uid 4242 (not root, the agent's uid); refusing to use it\n",
            "\(roots.stderr)"
        )
    }
}
