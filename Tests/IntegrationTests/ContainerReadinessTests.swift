import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What the agent relies on in a container, with the real binary: `trust_root: false`, numeric
/// socket groups, peers outside its PID namespace, the `ping` probe and the config watcher with
/// Kubernetes' symbolic-link swap.
@Suite("Containers without systemd")
struct ContainerReadinessTests {
    /// A directory laid out as Kubernetes mounts a ConfigMap: `config.json -> ..data/config.json`,
    /// `..data -> ..<generation>`; ``swap(to:)`` publishes a new generation with one rename.
    final class ConfigMapDirectory: Sendable {
        let path: String
        private let generation = Atomic(0)

        init(_ json: String) throws {
            path = try AgentProcess.makeTemporaryDirectory().path
            try publish(json)
            try FileManager.default.createSymbolicLink(
                atPath: "\(path)/config.json",
                withDestinationPath: "..data/config.json"
            )
        }

        var configPath: String { "\(path)/config.json" }

        /// Writes `json` into a new generation directory and swaps `..data` to it atomically.
        func swap(to json: String) throws { try publish(json) }

        private func publish(_ json: String) throws {
            let number = generation.add(1, ordering: .relaxed).newValue
            let directory = "..2026_11_25_\(number)"
            try FileManager.default.createDirectory(atPath: "\(path)/\(directory)", withIntermediateDirectories: false)
            try json.write(toFile: "\(path)/\(directory)/config.json", atomically: false, encoding: .utf8)
            let temporary = "\(path)/..data_tmp"
            try? FileManager.default.removeItem(atPath: temporary)
            try FileManager.default.createSymbolicLink(atPath: temporary, withDestinationPath: directory)
            guard rename(temporary, "\(path)/..data") == 0 else {
                throw AgentError("rename ..data: \(String(cString: strerror(errno)))")
            }
        }
    }

    private static func rules(vehicleUsers: [UInt32], watch: Bool = true) -> String {
        let users = vehicleUsers.map(String.init).joined(separator: ", ")
        return
            #"{"demo": true, "trust_root": false, "watch_config": \#(watch), "watch_interval": 0.1, "allow": {"vehicle": {"users": [\#(users)]}}}"#
    }

    /// The uid and gid the agent runs as here: not root, so that root's trust comes from
    /// `trust_root` alone (the agent's own uid passes every rule).
    static let agentUID: UInt32 = 4_000_500

    /// Starts the agent as ``agentUID`` (through `setpriv`, after `prefix`), on a socket in a
    /// directory of its own.
    private func unprivilegedAgent(_ arguments: [String], prefix: [String] = []) async throws -> AgentProcess {
        let directory = try AgentProcess.makeTemporaryDirectory().path
        guard chown(directory, Self.agentUID, Self.agentUID) == 0 else {
            throw AgentError("chown \(directory): \(String(cString: strerror(errno)))")
        }
        let setpriv = [which("setpriv")!, "--reuid=\(Self.agentUID)", "--regid=\(Self.agentUID)", "--clear-groups"]
        return try await AgentProcess(arguments, socketPath: directory + "/tokens.sock", launcher: prefix + setpriv)
    }

    @Test(
        .enabled(
            if: getuid() == 0 && which("setpriv") != nil,
            "needs root, and setpriv to start the agent as another uid"
        )
    )
    func rootIsAnOrdinaryUIDWithoutTrustRootAndAWatchedSwapReloads() async throws {
        let directory = try ConfigMapDirectory(Self.rules(vehicleUsers: [4_000_123]))
        let agent = try await unprivilegedAgent(["--config", directory.configPath])
        defer { Task { await agent.stop() } }
        #expect(try await agent.send("GET vehicle k-1") == ["ERR denied not allowed to ask for kind vehicle"])
        #expect(try await agent.send("GET trip k-1").first?.hasPrefix("OK ") == true, "a kind without rules stays open")

        // A half-written generation (broken JSON) is refused and the old rules stay.
        try directory.swap(to: #"{"trust_root": false, "allow": {"vehicle": "#)
        #expect(
            await eventually(within: 60, every: .milliseconds(50)) { agent.log.contains("reload refused") },
            "\(agent.log)"
        )
        #expect(try await agent.send("GET vehicle k-1") == ["ERR denied not allowed to ask for kind vehicle"])

        // The next swap names uid 0: reloaded without a signal, by the watcher.
        try directory.swap(to: Self.rules(vehicleUsers: [0]))
        let allowed = try await eventually(within: 60, every: .milliseconds(50)) {
            try await agent.send("GET vehicle k-1").first?.hasPrefix("OK ") == true
        }
        #expect(allowed, "\(agent.log)")
        #expect(agent.log.contains("configuration reloaded"))
        #expect(agent.log.contains("reason=watch"))
        let stats = try await agent.stats()
        #expect(stats["reloads"] == 1)
        // The broken generation: refused, and maybe tried again after its 2 s wait on a slow run.
        #expect((stats["reload_failures"] ?? 0) >= 1)

        // Watching turned off by a reload: a later swap is not applied.
        try directory.swap(to: Self.rules(vehicleUsers: [0], watch: false))
        #expect(
            try await eventually(within: 60, every: .milliseconds(50)) { (try await agent.stats())["reloads"] == 2 }
        )
        try directory.swap(to: Self.rules(vehicleUsers: [4_000_123], watch: false))
        try await Task.sleep(for: .milliseconds(600))
        #expect((try await agent.stats())["reloads"] == 2)
        #expect(try await agent.send("GET vehicle k-1").first?.hasPrefix("OK ") == true)
    }

    /// A configuration naming a file that is not there yet (a Secret mounted apart from the
    /// ConfigMap) is refused; the watcher tries it again when that file arrives, unwatched.
    @Test func aRefusedReloadIsTriedAgainOnceAFileItNamesArrives() async throws {
        let directory = try ConfigMapDirectory(#"{"demo": true, "watch_config": true, "watch_interval": 0.1}"#)
        let agent = try await AgentProcess(["--config", directory.configPath])
        defer { Task { await agent.stop() } }
        let headers = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("headers").path
        try directory.swap(
            to:
                #"{"watch_config": true, "watch_interval": 0.1, "providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "headers_file": "\#(headers)"}}}"#
        )
        #expect(
            // At least one: a slow run may see the refused configuration tried again (watch-retry)
            // before it looks.
            try await eventually(within: 60, every: .milliseconds(50)) {
                (try await agent.stats())["reload_failures"] ?? 0 >= 1
            },
            "\(agent.log)"
        )
        try "X-Api-Key: k1\n".write(toFile: headers, atomically: true, encoding: .utf8)
        #expect(
            try await eventually(within: 60, every: .milliseconds(50)) { (try await agent.stats())["reloads"] == 1 },
            "\(agent.log)"
        )
        #expect(agent.log.contains("reason=watch-retry"))
        #expect(try await agent.send("GET trip r-1").first?.hasPrefix("ERR bad-kind") == true, "only vehicle now")
    }

    @Test(
        .enabled(
            if: getuid() == 0 && which("setpriv") != nil,
            "needs root, and setpriv to start the agent as another uid"
        )
    )
    func rootStaysTrustedByDefault() async throws {
        let config = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("config.json").path
        try #"{"demo": true, "allow": {"vehicle": {"users": [4000123]}}}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        let agent = try await unprivilegedAgent(["--config", config])
        defer { Task { await agent.stop() } }
        #expect(try await agent.send("GET vehicle k-1").first?.hasPrefix("OK ") == true)
    }

    @Test(
        .enabled(
            if: getuid() == 0 && which("unshare") != nil && which("setpriv") != nil,
            "needs root, unshare for a PID namespace and setpriv"
        )
    )
    func aPeerOutsideTheAgentsPIDNamespaceIsLoggedByUIDWithoutAPID() async throws {
        let config = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("config.json").path
        try #"{"demo": true, "trust_root": false, "allow": {"vehicle": {"users": [4000123]}}}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        // The agent in a PID namespace of its own, as in a pod without hostPID: this process is
        // outside it, so SO_PEERCRED gives the agent pid 0 for it.
        let agent = try await unprivilegedAgent(
            ["--config", config],
            prefix: [which("unshare")!, "--pid", "--fork", "--mount-proc", "--kill-child=SIGTERM"]
        )
        defer {
            // unshare ignores SIGTERM while it waits for its child: the agent is stopped itself.
            let children =
                (try? String(contentsOfFile: "/proc/\(agent.pid)/task/\(agent.pid)/children", encoding: .utf8)) ?? ""
            for child in children.split(separator: " ").compactMap({ Int32($0) }) { kill(child, SIGTERM) }
            Task { await agent.stop() }
        }
        #expect(try await agent.send("GET vehicle k-1") == ["ERR denied not allowed to ask for kind vehicle"])
        let denial = try #require(agent.log.split(separator: "\n").first { $0.contains("request denied") })
        #expect(denial.contains("peer_uid=0"), "\(denial)")
        #expect(!denial.contains("peer_pid"), "\(denial)")
        #expect(!denial.contains("peer_process"), "\(denial)")
        // The agent's own uid from outside its PID namespace is any pod's: it passes no rule.
        if let socat = which("socat") {
            let sameUID = try await run(
                which("setpriv")!,
                [
                    "--reuid=\(Self.agentUID)", "--regid=\(Self.agentUID)", "--clear-groups", socat, "-t", "5", "-",
                    "UNIX-CONNECT:\(agent.socketPath)",
                ],
                stdin: "GET vehicle k-1\nGET trip k-1\n"
            )
            let replies = sameUID.stdout.split(separator: "\n").map(String.init)
            #expect(replies.first == "ERR denied not allowed to ask for kind vehicle", "\(sameUID)")
            #expect(replies.dropFirst().first?.hasPrefix("OK ") == true, "a kind without rules stays open")
        }

        // In its namespace the agent is pid 1, as in a container: `reload --pid 1` signals it there
        // (and nowhere else: on a host pid 1 is init).
        let children = try String(contentsOfFile: "/proc/\(agent.pid)/task/\(agent.pid)/children", encoding: .utf8)
        let inside = try #require(children.split(separator: " ").first.flatMap { Int32($0) })
        if let nsenter = which("nsenter") {
            let reloaded = try await run(
                nsenter,
                [
                    "--target", "\(inside)", "--pid", "--mount", "--", AgentProcess.binary, "reload", "--pid", "1",
                    "--socket", agent.socketPath,
                ]
            )
            #expect(reloaded.status == 0, "\(reloaded)")
            #expect((try await agent.stats())["reloads"] == 1)
        }
        let onHost = try await run(AgentProcess.binary, ["reload", "--pid", "1", "--socket", agent.socketPath])
        #expect(onHost.status == 1, "pid 1 here is init, not the agent")
        #expect(onHost.stderr.contains("cannot signal process 1"))

        // In the same PID namespace, the pid is named.
        let host = try await unprivilegedAgent(["--config", config])
        defer { Task { await host.stop() } }
        _ = try await host.send("GET vehicle k-1")
        let named = try #require(host.log.split(separator: "\n").first { $0.contains("request denied") })
        #expect(named.contains("peer_pid=\(getpid())"), "\(named)")
    }

    @Test(.enabled(if: getuid() == 0, "only root may give the socket to a group it is not in"))
    func aNumericSocketGroupNeedsNoGroupEntry() async throws {
        var gid: UInt32 = 4_000_321
        while getgrgid(gid) != nil { gid += 1 }
        let config = try AgentProcess.makeTemporaryDirectory().appendingPathComponent("config.json").path
        try #"{"demo": true, "socket_group": \#(gid), "socket_mode": "0660"}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        let agent = try await AgentProcess(["--config", config])
        defer { Task { await agent.stop() } }
        var info = stat()
        #expect(lstat(agent.socketPath, &info) == 0)
        #expect(info.st_gid == gid)
        #expect(info.st_mode & 0o777 == 0o660)
    }

    @Test func pingAnswersZeroOnPongAndSixtyNineWhenNobodyAnswers() async throws {
        let agent = try await AgentProcess(["--demo"])
        defer { Task { await agent.stop() } }
        let alive = try await run(AgentProcess.binary, ["ping", "--socket", agent.socketPath])
        #expect(alive.status == 0)
        #expect(alive.stdout == "PONG (demo issuer: Fleet Engine refuses its tokens)\n", "a demo agent says so")

        let missing = try await run(AgentProcess.binary, ["ping", "--socket", agent.directory.path + "/none.sock"])
        #expect(missing.status == 69)
        #expect(missing.stderr.contains("agent unreachable"))

        // A stopped agent accepts (the kernel's backlog) but never answers: the probe's time-out.
        kill(agent.pid, SIGSTOP)
        let started = Date()
        let stuck = try await run(AgentProcess.binary, ["ping", "--socket", agent.socketPath, "--timeout", "0.5"])
        kill(agent.pid, SIGCONT)
        #expect(stuck.status == 69)
        #expect(stuck.stderr.contains("agent unreachable"), "\(stuck.stderr)")
        // A hang detector (the probe's 0.5 s time-out is what ended it), not a latency bound.
        #expect(Date().timeIntervalSince(started) < 60)
    }

    @Test func pingFailsWithOneWhenTheRefresherStalledAndPassesWhenBusy() async throws {
        let stalled = try HostileAgent { _ in .line("ERR unavailable refresher stalled\n") }
        defer { stalled.stop() }
        let result = try await run(AgentProcess.binary, ["ping", "--socket", stalled.socketPath])
        #expect(result.status == 1)
        #expect(result.stderr.contains("refresher stalled"))
        // Every connection taken: the agent answers, so it is alive.
        let busy = try HostileAgent { _ in .line("ERR busy too many connections\n") }
        defer { busy.stop() }
        let full = try await run(AgentProcess.binary, ["ping", "--socket", busy.socketPath])
        #expect(full.status == 0, "\(full)")
        #expect(full.stdout.hasPrefix("busy"))
        let garbage = try HostileAgent { _ in .line("PANG\n") }
        defer { garbage.stop() }
        #expect(try await run(AgentProcess.binary, ["ping", "--socket", garbage.socketPath, "--quiet"]).status == 69)
    }
}
