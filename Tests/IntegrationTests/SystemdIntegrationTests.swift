import Foundation
import Systemd
import TestSupport
import Testing
import TokenAgent
import TokenWire

@Suite("systemd: socket activation, notify, fd store")
struct SystemdIntegrationTests {
    @Test func socketActivationAdoptsThePassedSocket() async throws {
        let activate = try #require(which("systemd-socket-activate"), "systemd-socket-activate must be installed")
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let directory = try AgentProcess.makeTemporaryDirectory()
        let socketPath = directory.appendingPathComponent("activated.sock").path
        let unusedPath = directory.appendingPathComponent("never-bound.sock").path
        let log = directory.appendingPathComponent("agent.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: activate)
        process.arguments = [
            "-l", socketPath, "--fdname=tokens", AgentProcess.binary, "serve", "--socket", unusedPath,
            "--provider", "vehicle=\(provider.url(kind: "vehicle"))",
        ]
        let handle = try FileHandle(forWritingTo: log)
        process.standardError = handle
        process.standardOutput = handle
        try process.run()
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        // The socket exists before the agent runs; the first connection starts it.
        var reply: [String] = []
        for _ in 0..<100 where reply.isEmpty {
            reply = (try? await SocketClient.exchange(socketPath, "GET vehicle act-1\n", lines: 1)) ?? []
            if reply.isEmpty { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(tokenOf(reply.first) != nil, "\(reply)")
        #expect(provider.requests(for: "act-1") == 1)
        #expect(!FileManager.default.fileExists(atPath: unusedPath), "the passed socket is used, --socket is not bound")
        let agentLog = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(agentLog.contains("listening on a socket passed by systemd"))
        kill(process.processIdentifier, SIGTERM)
        for _ in 0..<400 where process.isRunning { try await Task.sleep(for: .milliseconds(25)) }
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(FileManager.default.fileExists(atPath: socketPath), "systemd's socket is never unlinked")
    }

    @Test func notifyReadyWatchdogReloadStoppingAndTheFdStore() async throws {
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let directory = try AgentProcess.makeTemporaryDirectory()
        let notify = try NotifyListener(directory: directory)
        let environment = ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "600000"]
        let arguments = ["--provider", "vehicle=\(provider.url(kind: "vehicle"))"]
        let socketPath = directory.appendingPathComponent("tokens.sock").path

        // AgentProcess waits for a PING answer; start it concurrently and watch READY arrive.
        async let started = AgentProcess(arguments, socketPath: socketPath, environment: environment)
        let ready = try await notify.waitFor(timeout: 60) { $0.fields["READY"] == "1" }
        let readyMessage = try #require(ready)
        // READY=1 only once the socket answers: a request right now must succeed.
        let answer = try await SocketClient.exchange(socketPath, "PING\n", lines: 1)
        #expect(answer == ["PONG"])
        #expect(readyMessage.fields["STATUS"]?.contains("tokens held") == true)
        let agent = try await started

        let token = try #require(tokenOf(try await agent.send("GET vehicle fd-1").first))
        // Two pings come within a minute (at half of the 0.6 s WatchdogSec on a quiet machine; the
        // minute only catches an agent that stopped pinging).
        var pings: [NotifyListener.Message] = []
        let deadline = ContinuousClock.now + hangLimitDuration
        while pings.count < 2, ContinuousClock.now < deadline {
            if let message = try await notify.next(timeout: 1), message.fields["WATCHDOG"] == "1" {
                pings.append(message)
            }
        }
        #expect(pings.count >= 2, "WATCHDOG=1 at half of the 0.6 s WatchdogSec")

        kill(agent.pid, SIGHUP)
        let reloading = try await notify.waitFor(timeout: 60) { $0.fields["RELOADING"] == "1" }
        #expect(reloading?.fields["MONOTONIC_USEC"].flatMap(UInt64.init) != nil)
        #expect(try await notify.waitFor(timeout: 60) { $0.fields["READY"] == "1" } != nil, "READY=1 after the reload")
        #expect(try await agent.send("GET vehicle fd-1").first.flatMap(tokenOf) == token, "the reload kept the token")

        kill(agent.pid, SIGTERM)
        #expect(try await notify.waitFor(timeout: 60) { $0.fields["STOPPING"] == "1" } != nil)
        let stored = try #require(try await notify.waitFor(timeout: 60) { $0.fields["FDSTORE"] == "1" })
        #expect(stored.fields["FDNAME"] == "cache")
        let cacheFD = try #require(stored.descriptors.first)
        #expect(SealedMemoryFile.isSealed(cacheFD))
        let snapshot = try CacheSnapshot.read(try SealedMemoryFile.read(cacheFD))
        #expect(snapshot.formatVersion == 3)
        #expect(snapshot.providers["vehicle"] != nil)
        #expect(snapshot.tokens.map(\.id) == ["fd-1"])
        #expect(snapshot.tokens.first?.token == token)
        #expect(await agent.stop() == 0)

        // The next process gets the cache back as a passed descriptor named "cache".
        let launcher = [
            "/bin/sh", "-c",
            "exec 3</proc/\(getpid())/fd/\(cacheFD); LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=cache exec \"$0\" \"$@\"",
        ]
        let next = try await AgentProcess(
            arguments,
            socketPath: socketPath,
            environment: environment,
            launcher: launcher
        )
        #expect(
            try await next.send("GET vehicle fd-1").first.flatMap(tokenOf) == token,
            "served from the handed-over cache"
        )
        #expect(provider.requests(for: "fd-1") == 1, "no new provider fetch")
        #expect(
            try await notify.waitFor(timeout: 60) { $0.fields["FDSTOREREMOVE"] == "1" }?.fields["FDNAME"] == "cache"
        )
        #expect(next.log.contains("cache taken over from the previous process"))
        #expect(!next.log.contains(token))

        // A process whose vehicle provider is another (here: another max_lifetime) takes none of
        // its tokens: they came from the old one, under its rules.
        kill(next.pid, SIGTERM)
        let second = try #require(try await notify.waitFor(timeout: 60) { $0.fields["FDSTORE"] == "1" })
        let secondFD = try #require(second.descriptors.first)
        #expect(await next.stop() == 0)
        let config = directory.appendingPathComponent("other.json").path
        try #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))", "max_lifetime": 600}}}"#.write(
            toFile: config,
            atomically: true,
            encoding: .utf8
        )
        let changed = try await AgentProcess(
            ["--config", config],
            socketPath: socketPath,
            environment: environment,
            launcher: [
                "/bin/sh", "-c",
                "exec 3</proc/\(getpid())/fd/\(secondFD); LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=cache exec \"$0\" \"$@\"",
            ]
        )
        let refetched = try #require(tokenOf(try await changed.send("GET vehicle fd-1").first))
        #expect(refetched != token, "fetched again from the provider now configured")
        #expect(provider.requests(for: "fd-1") == 2)
        #expect(changed.log.contains("tokens_of_changed_providers=1"), "\(changed.log)")
        await changed.stop()
        close(secondFD)
        close(cacheFD)
    }

    @Test func brokenConfigOnReloadIsRefusedAndTheOldOneStays() async throws {
        let provider = try await FakeTokenProvider.start()
        defer { Task { await provider.stop() } }
        let directory = try AgentProcess.makeTemporaryDirectory()
        let config = directory.appendingPathComponent("config.json").path
        func writeConfig(_ text: String) throws { try text.write(toFile: config, atomically: true, encoding: .utf8) }
        try writeConfig(
            #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}, "trip": {"url": "\#(provider.url(kind: "trip"))"}}}"#
        )
        let agent = try await AgentProcess(["--config", config])
        let vehicle = try #require(tokenOf(try await agent.send("GET vehicle rl-1").first))
        let trip = try #require(tokenOf(try await agent.send("GET trip rl-2").first))

        try writeConfig(#"{"providers": {"vehicle": {"url": "ftp://nope/{id}"}}}"#)
        // As the unit's ExecReload= does it: signal, then wait for the outcome.
        let refused = try await run(
            AgentProcess.binary,
            ["reload", "--pid", "\(agent.pid)", "--socket", agent.socketPath]
        )
        #expect(refused.status == 1, "a refused reload fails systemctl reload")
        // The agent's own reason, not "see its log": the key and what is wrong with it.
        #expect(
            refused.stderr.hasPrefix(
                "fleet-tokend: the agent refused the new configuration and kept the old one: configuration key providers.vehicle.url: "
            ),
            "\(refused.stderr)"
        )
        #expect(!refused.stderr.contains("see its log"))
        #expect(agent.log.contains("reload refused; the old configuration stays"))
        let refusal = try #require(try await agent.send("STATS").first.map { WireReply.statsFields(String($0)) })
        #expect(
            refusal["reload_error"].flatMap(StatsText.decode)?.hasPrefix("configuration key providers.vehicle.url")
                == true
        )

        // A typo in the file's syntax: where it is.
        try writeConfig("{\"providers\": {\n  \"vehicle\": {\"url\": \"\(provider.url(kind: "vehicle"))\"},\n}}")
        let typo = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
        #expect(typo.status == 1)
        #expect(
            typo.stderr.hasSuffix(
                "kept the old one: configuration key config: not valid JSON: line 3, column 1: unexpected '}'\n"
            ),
            "\(typo.stderr)"
        )
        #expect(try await agent.send("GET vehicle rl-1").first.flatMap(tokenOf) == vehicle)

        // Change only trip's provider (a new field name): vehicle's token stays, trip's is dropped.
        try writeConfig(
            #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}, "trip": {"url": "\#(provider.url(kind: "trip"))", "token_field": "jwt"}}}"#
        )
        // Without --pid: the agent answering on the socket is the one signalled.
        let applied = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(
            applied.stdout
                == "reload applied by the agent on \(agent.socketPath) (process \(agent.pid)): provider or issuer changed (tokens dropped): trip\n"
        )
        #expect(agent.log.contains("configuration reloaded"), "reload returns once the reload is applied")
        let stats = try await agent.stats()
        #expect(stats["reloads"] == 1)
        #expect(stats["reload_failures"] == 2)
        #expect(try await agent.send("GET vehicle rl-1").first.flatMap(tokenOf) == vehicle)
        #expect(try await agent.send("GET trip rl-2").first.flatMap(tokenOf) != trip)
        #expect(provider.requests(for: "rl-1") == 1)
        #expect(provider.requests(for: "rl-2") == 2)

        // No answer on the socket: the outcome cannot be read, and that is a failure, not a success.
        let blind = try await run(
            AgentProcess.binary,
            ["reload", "--pid", "\(agent.pid)", "--socket", agent.directory.path + "/none.sock"]
        )
        #expect(blind.status == 1, "\(blind.stderr)")
        #expect(blind.stderr.contains("cannot signal process \(agent.pid): no agent answers on"), "\(blind.stderr)")
        let blindWithoutPID = try await run(
            AgentProcess.binary,
            ["reload", "--socket", agent.directory.path + "/none.sock"]
        )
        #expect(blindWithoutPID.status == 1)
        #expect(blindWithoutPID.stderr.contains("cannot signal the agent: no agent answers on"))

        // Another process's pid is refused, whatever it runs: only the agent on the socket is
        // signalled, and only when it names that pid as its own.
        let sleeper = ChildProcess()
        sleeper.executableURL = URL(fileURLWithPath: which("sleep")!)
        sleeper.arguments = ["30"]
        try sleeper.run()
        let stranger = try await run(
            AgentProcess.binary,
            ["reload", "--pid", "\(sleeper.processIdentifier)", "--socket", agent.socketPath]
        )
        #expect(stranger.status == 1)
        #expect(stranger.stderr.contains("cannot signal process \(sleeper.processIdentifier)"), "\(stranger.stderr)")
        #expect(sleeper.isRunning, "the other process was not signalled")
        sleeper.terminate()
        #expect((try await agent.stats())["reloads"] == 1, "nor was the agent")

        // What a reload changed, said in words: nothing; then a kind removed, one added, rules,
        // the log level.
        let same = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
        #expect(same.stdout.hasSuffix("(process \(agent.pid)): nothing changed\n"), "\(same.stdout)")
        try writeConfig(
            #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}, "task": {"url": "\#(provider.url(kind: "task"))"}}, "log_level": "debug", "allow": {"vehicle": {"users": ["root"]}}}"#
        )
        let several = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
        #expect(several.status == 0, "\(several.stderr)")
        #expect(
            several.stdout.hasSuffix(
                "(process \(agent.pid)): kinds added: task; kinds removed: trip; rules changed: vehicle; log level changed\n"
            ),
            "\(several.stdout)"
        )
        let base =
            #"{"providers": {"vehicle": {"url": "\#(provider.url(kind: "vehicle"))"}, "task": {"url": "\#(provider.url(kind: "task"))"}}, "log_level": "debug", "allow": {"vehicle": {"users": ["root"]}}"#
        // A key read only at start-up is said until the agent restarts, even by a reload that
        // changes nothing else; `other` is whatever else (here `admin`).
        for (extra, said) in [
            (#", "refresh_margin": 900}"#, "refresh policy changed"),
            (#", "refresh_margin": 900, "request_timeout": 4}"#, "take effect at the next restart: request_timeout"),
            (#", "refresh_margin": 900, "request_timeout": 4}"#, "take effect at the next restart: request_timeout"),
            (#", "refresh_margin": 900, "admin": {"users": ["root"]}}"#, "other settings changed"),
        ] {
            try writeConfig(base + extra)
            let reload = try await run(AgentProcess.binary, ["reload", "--socket", agent.socketPath])
            #expect(reload.stdout.hasSuffix("(process \(agent.pid)): \(said)\n"), "\(reload.stdout)")
        }
        let changes = try await agent.send("STATS").first.map { WireReply.statsFields(String($0.dropFirst(3))) }
        #expect(changes?["reload_changes"] == "other")
        #expect(await agent.stop() == 0)
    }
}
