import Foundation
import Testing

@Suite("Serving tokens through the socket")
struct ServingTests {
    @Test func getThroughTheSocketSocatAndTheCLI() async throws {
        try await withProviderAndAgent { agent, provider in
            let asked = Int(Date().timeIntervalSince1970)
            let reply = try await agent.send("GET vehicle v-1")
            let answered = Int(Date().timeIntervalSince1970)
            let token = try #require(tokenOf(reply.first), "\(reply)")
            #expect(provider.issuedTokens == [token])
            // An hour from when the provider made it: between the ask and the answer, however
            // long a loaded machine took.
            let expiresAt = try #require(Int(reply[0].split(separator: " ")[2]))
            #expect((asked + 3600)...(answered + 3600) ~= expiresAt, "\(expiresAt) for \(asked)...\(answered)")

            let socat = try #require(which("socat"), "socat must be installed (scripts/test installs it)")
            let viaSocat = try await run(
                "/bin/sh",
                ["-c", "printf 'GET vehicle v-1\\nPING\\n' | \(socat) - UNIX-CONNECT:\(agent.socketPath)"]
            )
            #expect(viaSocat.status == 0)
            #expect(viaSocat.stdout.split(separator: "\n").map(String.init) == [reply[0], "PONG"])

            let cli = try await run(AgentProcess.binary, ["get", "vehicle", "v-1", "--socket", agent.socketPath])
            #expect(cli.status == 0)
            #expect(cli.stdout == token + "\n", "get prints just the token")
            #expect(provider.requests(for: "v-1") == 1)

            let env = ["FLEET_TOKEND_SOCKET": agent.socketPath, "PATH": "/usr/bin:/bin"]
            let viaEnvironment = try await run(AgentProcess.binary, ["get", "trip", "t-1"], environment: env)
            #expect(viaEnvironment.status == 0)
            #expect(provider.requests(for: "t-1") == 1)
        }
    }

    @Test func cliExitStatuses() async throws {
        try await withProviderAndAgent { agent, _ in
            func status(_ kind: String, _ id: String) async throws -> Int32 {
                try await run(AgentProcess.binary, ["get", kind, id, "--socket", agent.socketPath]).status
            }
            let statuses = [
                try await status("vehicle", "status503-x"), try await status("vehicle", "status403-x"),
                try await status("vehicle", "a/b"),
                try await status("boat", "b-1"),
            ]
            #expect(statuses == [69, 77, 65, 65])
            let unreachable = try await run(
                AgentProcess.binary,
                ["get", "vehicle", "v", "--socket", agent.directory.path + "/none.sock"]
            )
            #expect(unreachable.status == 69)
        }
    }

    @Test func twoHundredConcurrentGetsOfOneColdKeyReachTheProviderOnce() async throws {
        try await withProviderAndAgent(configure: { $0.setDelay(milliseconds: 500) }) { agent, provider in
            let replies = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<200 {
                    group.addTask {
                        try await SocketClient.exchange(agent.socketPath, "GET vehicle cold-1\n", lines: 1).first
                    }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(replies.count == 200)
            let tokens = Set(replies.map(tokenOf))
            #expect(tokens.count == 1)
            #expect(tokens.first! != nil)
            #expect(provider.requests(for: "cold-1") == 1)
            let stats = try await agent.stats()
            #expect(stats["fetches"] == 1)
            #expect(stats["misses"]! + stats["hits"]! == 200)
        }
    }

    @Test func pipelinedRequestsAnswerInOrder() async throws {
        try await withProviderAndAgent { agent, _ in
            // The slow fetch is asked first, so later answers are ready before it: order must hold.
            let request = [
                "GET vehicle slow-1", "PING", "GET vehicle fast-1", "HELP", "NONSENSE", "GET trip slow-2",
                "DROP vehicle other", "GET vehicle fast-1", "GET boat x", "PING",
            ]
            let replies = try await SocketClient.exchange(
                agent.socketPath,
                request.map { $0 + "\n" }.joined(),
                lines: request.count
            )
            #expect(replies.count == request.count)
            guard replies.count == request.count else { return }
            #expect(tokenOf(replies[0]) != nil)
            #expect(replies[1] == "PONG")
            #expect(tokenOf(replies[2]) != nil)
            #expect(replies[3] == "OK GET REFRESH DROP INFO PING STATS METRICS HELP QUIT SHM TOUCH WARM")
            #expect(replies[4].hasPrefix("ERR bad-request "))
            #expect(tokenOf(replies[5]) != nil)
            #expect(replies[6] == "OK")
            #expect(tokenOf(replies[7]) != nil)
            #expect(tokenOf(replies[7]) == tokenOf(replies[2]), "one fetch served both")
            #expect(replies[8].hasPrefix("ERR bad-kind "))
            #expect(replies[9] == "PONG")
            let dropped = try await agent.send("DROP vehicle fast-1", "GET vehicle fast-1")
            #expect(dropped.first == "OK")
            #expect(tokenOf(dropped.last) != tokenOf(replies[2]), "DROP forgot the token, so it was fetched again")
        }
    }

    @Test func halfClosedClientGetsEveryReply() async throws {
        try await withProviderAndAgent { agent, _ in
            let replies = try await SocketClient.exchange(
                agent.socketPath,
                "GET vehicle slow-h\nPING\nGET trip t-h",
                halfClose: true
            )
            #expect(replies.count == 3, "the last line has no LF and still counts at end of input")
            #expect(tokenOf(replies.first) != nil)
            #expect(replies.dropFirst().first == "PONG")
            #expect(tokenOf(replies.last) != nil)
        }
    }

    @Test func crlfAndCaseInsensitiveVerbs() async throws {
        try await withProviderAndAgent { agent, _ in
            let replies = try await SocketClient.exchange(
                agent.socketPath,
                "ping\r\nGet vehicle v-c\r\nstats\r\n",
                lines: 3
            )
            #expect(replies.first == "PONG")
            #expect(tokenOf(replies.dropFirst().first) != nil)
            #expect(
                replies.last?.hasPrefix("OK entries=1 hits=0 misses=1 fetches=1 fetch_errors=0 connections=") == true
            )
        }
    }

    @Test func quitClosesTheConnection() async throws {
        try await withProviderAndAgent { agent, _ in
            let replies = try await SocketClient.exchange(agent.socketPath, "PING\nQUIT\nPING\n")
            #expect(replies == ["PONG"])
        }
    }

    @Test func statsCountsWhatHappened() async throws {
        try await withProviderAndAgent { agent, _ in
            // One request at a time: a GET that arrives while its key is being fetched waits for
            // that fetch and counts as a miss.
            for id in ["s-1", "s-1", "s-2", "status500-s"] { _ = try await agent.send("GET vehicle \(id)") }
            let stats = try await agent.stats()
            #expect(stats["entries"] == 3)
            #expect(stats["hits"] == 1)
            #expect(stats["misses"] == 3)
            #expect(stats["fetches"] == 3)
            #expect(stats["fetch_errors"] == 1)
            #expect(stats["connections"] == 1, "the STATS connection itself")
            #expect(stats["uptime_s"] != nil)
        }
    }

    @Test func demoIssuerWhenNothingIsConfigured() async throws {
        let agent = try await AgentProcess(["--demo"])
        let reply = try await agent.send("GET vehicle v-demo", "GET delivery-vehicle d-1")
        let vehicleToken = try #require(tokenOf(reply.first))
        let claims = try #require(jwtPart(vehicleToken, 1))
        #expect((claims["authorization"] as? [String: String]) == ["vehicleid": "v-demo"])
        let deliveryToken = try #require(tokenOf(reply.last))
        let delivery = try #require(jwtPart(deliveryToken, 1))
        #expect((delivery["authorization"] as? [String: String]) == ["deliveryvehicleid": "d-1"])
        #expect(agent.log.contains("DEMO ISSUER"))
        #expect(await agent.stop() == 0)
        #expect(!FileManager.default.fileExists(atPath: agent.socketPath), "the socket file is removed at exit")
    }
}
