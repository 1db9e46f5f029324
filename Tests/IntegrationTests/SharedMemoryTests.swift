import FleetTokenClient
import Foundation
import Synchronization
import TestSupport
import Testing
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Shared-memory read path", .enabled(if: CReader.available, "needs a C compiler for Examples/shm-reader"))
struct SharedMemoryTests {
    @Test func aCReaderAndTheClientReadTheAgentsTokensFromMemory() async throws {
        try await withProviderAndAgent { agent, provider in
            let reply = try #require(try await agent.send("GET vehicle m-1").first)
            let fields = reply.split(separator: " ")
            let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
            defer { reader.stop() }
            #expect(reader.greeting?.hasPrefix("SEGMENT generation=") == true, "\(reader.greeting ?? "")")
            #expect(try await reader.ask("m-1") == "HIT \(fields[1]) \(fields[2])")
            #expect(try await reader.ask("m-2") == "MISS")

            let client = FleetTokenClient(socketPath: agent.socketPath)
            let first = try await client.token(.vehicle("m-1"))
            #expect(first.jwt == String(fields[1]))
            for _ in 0..<200 { #expect(try await client.token(.vehicle("m-1")) == first) }
            #expect(client.sharedMemoryReads >= 200)
            #expect(client.localCounters.memoHits == 0, "a kind with a segment is not memoised")
            #expect(client.localCounters.requests <= 2, "SHM, and nothing else: \(client.localCounters)")
            #expect(provider.requests(for: "m-1") == 1)
        }
    }

    /// A config with no re-fetch guard: a REFRESH reporting the token just fetched fetches again
    /// at once (with the guard, one replacement per 5 s per key).
    private func noRefetchGuard() throws -> [String] {
        let path = TestTemporary.path("ftd-noguard", suffix: ".json")
        try #"{"refetch_guard": 0}"#.write(toFile: path, atomically: true, encoding: .utf8)
        return ["--config", path]
    }

    @Test func aRefreshedOrDroppedTokenIsWhatTheNextReadInAnotherProcessSees() async throws {
        try await withProviderAndAgent(try noRefetchGuard()) { agent, _ in
            var current = try #require(tokenOf(try await agent.send("GET vehicle c-1").first))
            let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
            defer { reader.stop() }
            var stale = 0
            for _ in 0..<30 {
                // Process A (this one) is refused the token and asks for a new one; then B reads.
                let fresh = try #require(tokenOf(try await agent.send("REFRESH vehicle c-1 \(current)").first))
                #expect(fresh != current)
                let seen = try await reader.ask("c-1") ?? ""
                if !seen.hasPrefix("HIT \(fresh) ") { stale += 1 }
                current = fresh
            }
            #expect(stale == 0, "reads after a refresh that saw the old token or none")
            #expect(try await agent.send("DROP vehicle c-1") == ["OK"])
            #expect(try await reader.ask("c-1") == "MISS")
        }
    }

    @Test func theClientNeverHandsOutATokenAnotherWorkerHadReplaced() async throws {
        // The issue's incoherence: another worker is refused the token and REFRESHes it; this
        // client's next call must return the replacement, every time (20 rounds).
        try await withProviderAndAgent(try noRefetchGuard()) { agent, _ in
            let client = FleetTokenClient(socketPath: agent.socketPath)
            var current = try await client.token(.vehicle("coherent-1"))
            var stale = 0
            for _ in 0..<20 {
                #expect(try await client.token(.vehicle("coherent-1")) == current, "read from memory")
                let replaced = try #require(
                    tokenOf(try await agent.send("REFRESH vehicle coherent-1 \(current.jwt)").first)
                )
                let next = try await client.token(.vehicle("coherent-1"))
                if next.jwt != replaced { stale += 1 }
                current = next
            }
            #expect(stale == 0)
            #expect(client.sharedMemoryReads >= 40, "every call after the first was read from memory")
        }
    }

    @Test func aReceivedDescriptorCannotBeWrittenResizedOrMappedWritable() async throws {
        try await withProviderAndAgent { agent, _ in
            let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
            defer { reader.stop() }
            #expect(try await reader.ask("SEALCHECK") == "SEALCHECK pwrite=EPERM ftruncate=EPERM mmap=EPERM")
        }
    }

    @Test func aKilledAgentsSegmentIsIgnoredWithinSeconds() async throws {
        let provider = try await FakeTokenProvider.start()
        let agent = try await AgentProcess(["--provider", "vehicle=\(provider.url(kind: "vehicle"))"])
        _ = try await agent.send("GET vehicle k-1")
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(try await reader.ask("k-1")?.hasPrefix("HIT ") == true)
        kill(agent.pid, SIGKILL)
        _ = await agent.stop()
        // The heartbeat is 3 s old at most a second after the kill's last beat: the reader's
        // answer turns as soon as it is. Waited for as an event (`hangLimit` only catches a hang).
        var answer = ""
        _ = try await eventually(every: .milliseconds(50)) {
            answer = try await reader.ask("k-1") ?? ""
            return answer.hasPrefix("UNUSABLE")
        }
        #expect(answer == "UNUSABLE agent heartbeat stale")
        await provider.stop()
    }

    @Test func aCleanStopRetiresAndWipesTheSegments() async throws {
        let provider = try await FakeTokenProvider.start()
        let agent = try await AgentProcess(["--provider", "vehicle=\(provider.url(kind: "vehicle"))"])
        _ = try await agent.send("GET vehicle w-1")
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(try await reader.ask("w-1")?.hasPrefix("HIT ") == true)
        #expect(await agent.stop() == 0)
        #expect(try await reader.ask("w-1") == "UNUSABLE segment retired")
        await provider.stop()
    }

    @Test func theOperatorSwitchTurnsSharedMemoryOff() async throws {
        try await withProviderAndAgent(["--no-shared-memory"]) { agent, _ in
            #expect(try await agent.send("SHM vehicle") == ["ERR unavailable shared memory is off"])
            let client = FleetTokenClient(socketPath: agent.socketPath)
            let token = try await client.token(.vehicle("off-1"))
            #expect(try await client.token(.vehicle("off-1")) == token)
            #expect(client.sharedMemoryReads == 0)
            #expect(client.localCounters.memoHits == 1, "without a segment the memo answers")
            let stats = try await agent.stats()
            #expect(stats["shm_segments"] == nil)
        }
    }

    @Test func touchKeepsKeysReadThroughMemoryAliveAndNeverFetches() async throws {
        try await withProviderAndAgent { agent, provider in
            _ = try await agent.send("GET vehicle t-1")
            #expect(try await agent.send("TOUCH vehicle t-1 t-unknown t-2") == ["OK"])
            #expect(provider.requests(for: "t-unknown") == 0, "TOUCH never fetches")
            #expect(provider.requests(for: "t-2") == 0)
            #expect(try await agent.send("TOUCH nosuchkind t-1") == ["OK"], "always OK")
            #expect(try await agent.send("TOUCH vehicle bad/id").first?.hasPrefix("ERR bad-id") == true)
            let stats = try await agent.stats()
            #expect(stats["touches"] == 1, "an unconfigured kind counts nothing")
        }
    }

    @Test func aKeyReadOnlyThroughMemoryIsStillRefreshedInTheBackground() async throws {
        // 30 s tokens (refresh due at 15 s at the latest; served until 10 s are left), an idle
        // time-out of 3 s: only the client's TOUCH reports (every second) keep the key active.
        try await withProviderAndAgent(["--idle-timeout", "3"], configure: { $0.setLifetime(30) }) { agent, provider in
            let client = FleetTokenClient(socketPath: agent.socketPath)
            let first = try await client.token(.vehicle("live-1"))
            var latest = first
            let deadline = Date().addingTimeInterval(25)
            while latest == first, Date() < deadline {
                latest = try await client.token(.vehicle("live-1"))
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(latest != first, "the refreshed token reached the segment")
            let stats = try await agent.stats()
            #expect(stats["misses"] == 1, "never a cold fetch after the first")
            #expect(stats["refreshes"] == 1, "refreshed in the background")
            #expect(stats["touches"]! >= 3)
            #expect(provider.requests(for: "live-1") == 2)
        }
    }

    @Test func shmIsLimitedToOneDescriptorPerKindAndGenerationPerConnection() async throws {
        try await withProviderAndAgent { agent, _ in
            let replies = try await agent.send("SHM vehicle", "SHM vehicle", "SHM nosuchkind", "PING")
            #expect(replies.count == 4)
            #expect(replies[0].hasPrefix("OK size="))
            #expect(replies[1].hasPrefix("ERR busy segment "), "\(replies[1])")
            #expect(replies[2].hasPrefix("ERR bad-kind"), "\(replies[2])")
            #expect(replies[3] == "PONG", "replies after a descriptor keep their order")
        }
    }

    @Test func sharedMemoryRotationSetsHowOldASegmentGets() async throws {
        let config = TestTemporary.path("ftd-rotation", suffix: ".json")
        try #"{"shared_memory_rotation": 1}"#.write(toFile: config, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: config) }
        try await withProviderAndAgent(["--config", config]) { agent, _ in
            func generation() async throws -> String? {
                let reply = try await agent.send("SHM vehicle 1 2").first ?? ""
                return WireReply.statsFields(String(reply.dropFirst(3)))["generation"]
            }
            let first = try #require(try await generation())
            // The heartbeat (every second) replaces a segment older than a second: a new
            // generation within a few beats (each `send` is a new connection).
            let rotated = try await eventually { (try await generation() ?? first) != first }
            #expect(rotated, "no new generation with shared_memory_rotation 1")
        }
    }

    @Test func readersThatDoNotNameLayoutTwoAreStillOfferedIt() async throws {
        try await withProviderAndAgent { agent, _ in
            // A request may name no layout, or others than 2: the agent offers the layout it
            // writes all the same (the reader refuses what it cannot read); one that names 2 after
            // the first was sent this generation is busy.
            let replies = try await agent.send("SHM vehicle", "SHM trip 1", "SHM vehicle 1 2", "SHM vehicle x", "STATS")
            #expect(replies.count == 5)
            #expect(replies[0].hasPrefix("OK size=") && replies[0].contains(" layout=2 "), "\(replies[0])")
            #expect(replies[1].hasPrefix("OK size=") && replies[1].contains(" layout=2 "), "\(replies[1])")
            #expect(replies[2].hasPrefix("ERR busy segment "), "\(replies[2])")
            #expect(replies[3] == "ERR bad-request usage: SHM <kind> [<layout> ...]")
            #expect(WireReply.statsFields(String(replies[4].dropFirst(3)))["shm_old_readers"] == nil, "no such count")
        }
    }

    @Test(.enabled(if: TestUsers.available, "needs root, useradd, runuser and socat"))
    func aPeerOutsideAKindsRulesNeverGetsItsSegmentNorTokensFetchedAfterAReload() async throws {
        try await TestUsers.ensure()
        let config = TestTemporary.path("ftd-rules", suffix: ".json")
        func allow(_ user: String) throws {
            try #"{"allow": {"vehicle": {"users": ["\#(user)"]}}}"#.write(
                toFile: config,
                atomically: true,
                encoding: .utf8
            )
        }
        try allow(TestUsers.allowed)
        try await withProviderAndAgent(["--config", config, "--socket-mode", "0666"]) { agent, _ in
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: agent.directory.path)
            let before = try #require(tokenOf(try await agent.send("GET vehicle r-1").first))
            let allowed = try await SegmentReaderProcess(
                socket: agent.socketPath,
                kind: "vehicle",
                runAs: TestUsers.allowed
            )
            defer { allowed.stop() }
            #expect(allowed.greeting?.hasPrefix("SEGMENT ") == true, "\(allowed.greeting ?? "")")
            #expect(try await allowed.ask("r-1")?.hasPrefix("HIT \(before) ") == true)
            let other = try await SegmentReaderProcess(
                socket: agent.socketPath,
                kind: "vehicle",
                runAs: TestUsers.other
            )
            other.stop()
            #expect(other.greeting == "NOSEGMENT ERR denied not allowed to ask for kind vehicle")

            // The reload takes the allowed user out of vehicle's rules.
            try allow(TestUsers.other)
            let reloads = try await agent.stats()["reloads"] ?? 0
            kill(agent.pid, SIGHUP)
            var applied = false
            for _ in 0..<100 where !applied {
                applied = (try await agent.stats()["reloads"] ?? 0) > reloads
                if !applied { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(applied)
            let after = try #require(tokenOf(try await agent.send("GET vehicle r-2").first))
            #expect(try await allowed.ask("r-2") == "UNUSABLE segment retired", "no token fetched after the reload")
            #expect(try await allowed.ask("r-1") == "UNUSABLE segment retired", "the old segment is wiped")
            let again = try await SegmentReaderProcess(
                socket: agent.socketPath,
                kind: "vehicle",
                runAs: TestUsers.allowed
            )
            again.stop()
            #expect(again.greeting == "NOSEGMENT ERR denied not allowed to ask for kind vehicle")
            let now = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle", runAs: TestUsers.other)
            defer { now.stop() }
            #expect(try await now.ask("r-2")?.hasPrefix("HIT \(after) ") == true, "the newly allowed user reads it")
        }
    }

    @Test func theSeqlockHoldsAcrossProcessesWhileTheAgentRewritesThirteenThousandKeys() async throws {
        // 8,000 keys cached before the readers start, 5,000 more while they read: 13,000 in all.
        let keys = 8000
        let added = 5000
        let config = TestTemporary.path("ftd-stress", suffix: ".json")
        // The provider's deadline is a hang detector here (the flag sets its URL, the file its
        // timeout): under a loaded parallel run, fetches of 13,000 keys outlasted the default 10 s.
        try
            #"{"refetch_guard": 0, "max_concurrent_fetches": 64, "providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "timeout": 120}}}"#
            .write(
                toFile: config,
                atomically: true,
                encoding: .utf8
            )
        try await withProviderAndAgent(["--config", config]) { agent, _ in
            // 8,000 keys cached, then the readers start. While they read, 5,000 more are cached
            // (past the table's load factor: the segment grows to a new generation under them)
            // and keys are refetched at random among all 13,000. Tokens are of random length
            // (pad- ids).
            func cache(_ range: Range<Int>) async throws {
                for start in stride(from: range.lowerBound, to: range.upperBound, by: 500) {
                    let end = min(range.upperBound, start + 500)
                    let batch = (start..<end).map { "GET vehicle pad-\($0)\n" }.joined()
                    let replies = try await SocketClient.exchange(agent.socketPath, batch, lines: end - start)
                    let failed = replies.filter { !$0.hasPrefix("OK ") }
                    #expect(failed.isEmpty, "\(failed.count) of \(replies.count) failed, first: \(failed.first ?? "")")
                }
            }
            try await cache(0..<keys)
            var started: [SegmentReaderProcess] = []
            for _ in 0..<8 {
                started.append(
                    try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle", yielding: true)
                )
            }
            let readers = started
            defer { for reader in readers { reader.stop() } }
            let results = Task {
                try await withThrowingTaskGroup(of: String?.self) { group in
                    // Answered at STOP, once the rewrites below are done, however long they take.
                    for reader in readers {
                        group.addTask { try await reader.ask("STRESS 600 \(keys + added) pad-", within: 600) }
                    }
                    return try await group.reduce(into: [String?]()) { $0.append($1) }
                }
            }
            try await cache(keys..<(keys + added))
            var refreshed = 0
            for _ in 0..<10 {
                let batch = (0..<100).map { _ in "REFRESH vehicle pad-\(Int.random(in: 0..<(keys + added)))\n" }
                    .joined()
                let replies = try await SocketClient.exchange(agent.socketPath, batch, lines: 100)
                refreshed += replies.filter { $0.hasPrefix("OK ") }.count
            }
            for reader in readers { try await reader.send("STOP") }
            var totals: [String: Int] = [:]
            for line in try await results.value {
                let fields = try #require(line, "a reader did not answer").split(separator: " ").dropFirst()
                for field in fields {
                    let pair = field.split(separator: "=")
                    totals[String(pair[0]), default: 0] += Int(pair[1]) ?? 0
                }
            }
            print("seqlock stress:", totals, "refreshed:", refreshed)
            #expect(totals["bad"] == 0, "torn or wrong tokens read: \(totals)")
            #expect(totals["lost"] == 0, "reads with no answer: \(totals)")
            #expect(totals["hits", default: 0] > 10_000, "\(totals)")
            #expect(
                totals["remaps", default: 0] >= 8,
                "every reader followed the segment to a new generation: \(totals)"
            )
            #expect(refreshed == 1000, "the agent rewrote keys throughout: \(refreshed)")
            let stats = try await agent.stats()
            #expect(stats["shm_not_mirrored"] == 0)
            #expect(stats["shm_tokens"] == keys + added)
        }
    }

    @Test func aReaderFollowsTheAgentAcrossARestart() async throws {
        let provider = try await FakeTokenProvider.start()
        let arguments = ["--provider", "vehicle=\(provider.url(kind: "vehicle"))"]
        let first = try await AgentProcess(arguments)
        let before = try #require(tokenOf(try await first.send("GET vehicle f-1").first))
        let reader = try await SegmentReaderProcess(socket: first.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(try await reader.ask("f-1")?.hasPrefix("HIT \(before) ") == true)
        // The reader follows until it has read the token 100 times after a reconnect (or for
        // 300 s, which only a hang reaches): the restart may take as long as the machine needs.
        try await reader.send("FOLLOW 300 f-1")
        #expect(try await reader.readLine() == "FOLLOWING HIT")
        #expect(await first.stop() == 0)
        let second = try await AgentProcess(arguments, socketPath: first.socketPath)
        _ = try await second.send("GET vehicle f-1")
        let report = try #require(try await reader.readLine(within: 300), "the reader did not report")
        #expect(report.contains(" reconnects=1 "), "\(report)")
        #expect(report.contains(" lost=0 "), "\(report)")
        #expect(report.hasSuffix(" last=HIT"), "reads from the new agent's segment: \(report)")
        #expect(!report.contains("hits_after_reconnect=0 "), "\(report)")
        await second.stop()
        await provider.stop()
    }
    @Test func theClientReadsThroughAKilledAgentAndMapsTheNextOnesSegment() async throws {
        let provider = try await FakeTokenProvider.start()
        let arguments = ["--provider", "vehicle=\(provider.url(kind: "vehicle"))"]
        let first = try await AgentProcess(arguments)
        let client = FleetTokenClient(socketPath: first.socketPath)
        let before = try await client.token(.vehicle("r-1"))
        #expect(try await client.token(.vehicle("r-1")) == before)
        #expect(client.sharedMemoryReads >= 1, "the second read came from memory")
        kill(first.pid, SIGKILL)
        _ = await first.stop()
        let second = try await AgentProcess(arguments, socketPath: first.socketPath)
        // Every call answers: the old token while the killed agent's segment is fresh (it is
        // still valid), then the new agent's token, first over the socket and then from the new
        // agent's segment, which the client maps once it has dropped the stale one.
        let readsBefore = client.sharedMemoryReads
        var fromNewSegment = false
        var calls = 0
        let started = Date()
        while !fromNewSegment, Date().timeIntervalSince(started) < 20 {
            let token = try await client.token(.vehicle("r-1"))
            calls += 1
            #expect(token.remainingValidity > 0)
            if token != before {
                #expect(provider.issuedTokens.contains(token.jwt))
                let reads = client.sharedMemoryReads
                _ = try await client.token(.vehicle("r-1"))
                fromNewSegment = client.sharedMemoryReads > max(reads, readsBefore)
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(fromNewSegment, "after \(calls) calls the client does not read the new agent's segment")
        await second.stop()
        await provider.stop()
    }
}
