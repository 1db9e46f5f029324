import Foundation
import TestSupport
import Testing

@Suite("Bad input and bad providers")
struct BadInputTests {
    @Test func malformedLinesGetClearErrorsAndTheConnectionGoesOn() async throws {
        try await withProviderAndAgent { agent, _ in
            let lines: [[UInt8]] = [
                Array("FROB\n".utf8), Array("GET vehicle\n".utf8), Array("GET vehicle v-1 soon\n".utf8),
                Array("GET Boat b\n".utf8), Array("GET vehicle ../../etc/passwd\n".utf8),
                Array("GET vehicle ".utf8) + [0xC3, 0x28] + Array("\n".utf8), Array("\n".utf8),
                Array("GET vehicle \(String(repeating: "x", count: 65))\n".utf8), Array("GET vehicle a\u{0}b\n".utf8),
                Array("PING\n".utf8),
            ]
            let replies = try await SocketClient.exchange(agent.socketPath, lines.flatMap { $0 }, lines: lines.count)
            #expect(replies.count == lines.count)
            guard replies.count == lines.count else { return }
            #expect(replies[0] == "ERR bad-request unknown verb FROB; try HELP")
            #expect(replies[1].hasPrefix("ERR bad-request usage: GET"))
            #expect(
                replies[2]
                    == "ERR bad-request id contains whitespace, or min-validity is not whole seconds from 0 to 86400"
            )
            #expect(replies[3].hasPrefix("ERR bad-kind"))
            #expect(replies[4].hasPrefix("ERR bad-id"))
            #expect(replies[5] == "ERR bad-request line is not UTF-8")
            #expect(replies[6] == "ERR bad-request empty request")
            #expect(replies[7].hasPrefix("ERR bad-id id longer than 64"))
            #expect(replies[8].hasPrefix("ERR bad-id"))
            #expect(replies[9] == "PONG")
        }
    }

    @Test func overlongLineIsRefusedAndClosesOnlyThatConnection() async throws {
        try await withProviderAndAgent { agent, _ in
            let huge = "GET vehicle " + String(repeating: "x", count: 5000) + "\nPING\n"
            let replies = try await SocketClient.exchange(agent.socketPath, "PING\n" + huge)
            #expect(replies == ["PONG", "ERR bad-request line too long"], "nothing after the long line is answered")
            let endless = try await SocketClient.exchange(agent.socketPath, String(repeating: "y", count: 100_000))
            #expect(endless == ["ERR bad-request line too long"])
            #expect(try await agent.send("PING") == ["PONG"])
            let exactly = "GET vehicle " + String(repeating: "z", count: 4096 - 12)
            #expect(try await agent.send(exactly).first?.hasPrefix("ERR bad-id") == true, "4096 bytes is still a line")
        }
    }

    @Test func badProviderRepliesBecomeErrorsAndNothingElseSuffers() async throws {
        try await withProviderAndAgent(["--config", try providerTimeoutConfig(seconds: 10)]) { agent, provider in
            let cases: [(String, String)] = [
                ("garbage-1", "ERR unavailable"), ("wrongid-1", "ERR rejected"), ("expired-1", "ERR unavailable"),
                ("status503-1", "ERR unavailable"), ("status429-1", "ERR unavailable"),
                ("status408-1", "ERR unavailable"),
                ("status403-1", "ERR rejected"), ("status404-1", "ERR rejected"), ("huge-1", "ERR unavailable"),
                ("hang-1", "ERR unavailable"),
            ]
            let replies = try await SocketClient.exchange(
                agent.socketPath,
                cases.map { "GET vehicle \($0.0)\n" }.joined(),
                lines: cases.count
            )
            #expect(replies.count == cases.count)
            for ((id, expected), reply) in zip(cases, replies) {
                #expect(reply.hasPrefix(expected), "\(id): \(reply)")
            }
            #expect(provider.requests(for: "hang-1") == 1)
            // Asked again at once: the refusal is remembered and failures back off, same answers.
            for (id, expected) in cases {
                let reply = try await agent.send("GET vehicle \(id)")
                #expect(reply.first?.hasPrefix(expected) == true, "\(id): \(reply)")
            }
            for id in ["seed-1", "plain-1"] {
                let reply = try await agent.send("GET vehicle \(id)")
                let token = try #require(tokenOf(reply.first), "\(id): \(reply)")
                #expect(provider.issuedTokens.contains(token))
            }
            let asked = Int(Date().timeIntervalSince1970)
            let opaque = try #require(try await agent.send("GET vehicle opaque-1").first)
            let answered = Int(Date().timeIntervalSince1970)
            #expect(tokenOf(opaque) == "opaque-token-opaque-1")
            let opaqueExpiry = try #require(Int(opaque.split(separator: " ")[2]))
            #expect((asked + 600)...(answered + 600) ~= opaqueExpiry, "from Cache-Control: \(opaqueExpiry)")
            #expect(try await agent.send("PING") == ["PONG"])
            #expect(tokenOf(try await agent.send("GET trip fine-1").first) != nil)
        }
    }

    @Test func seedShapedReplyTakesTheExpiryFromTheJWT() async throws {
        try await withProviderAndAgent(configure: { $0.setLifetime(1800) }) { agent, _ in
            let asked = Int(Date().timeIntervalSince1970)
            let reply = try #require(try await agent.send("GET trip seed-trip").first)
            let answered = Int(Date().timeIntervalSince1970)
            let expiresAt = try #require(Int(reply.split(separator: " ")[2]))
            #expect((asked + 1800)...(answered + 1800) ~= expiresAt, "\(expiresAt) for \(asked)...\(answered)")
        }
    }

    @Test func slowReaderDoesNotStopOtherClients() async throws {
        try await withProviderAndAgent { agent, _ in
            // A client that writes requests as fast as the agent takes them and never reads a reply.
            let hostile = try RawSocket(path: agent.socketPath)
            let written = try await hostile.writeUntilBlocked(
                Array(String(repeating: "HELP\n", count: 20_000).utf8),
                rounds: 50
            )
            #expect(written > 0)
            for index in 0..<20 {
                #expect(tokenOf(try await agent.send("GET vehicle other-\(index)").first) != nil)
            }
            hostile.close()
            #expect(try await agent.send("PING") == ["PONG"])
        }
    }

    @Test func connectionLimitAnswersBusy() async throws {
        try await withProviderAndAgent(["--max-connections", "2"]) { agent, _ in
            var holders: [RawSocket] = []
            for _ in 0..<50 where holders.count < 2 {
                let holder = try RawSocket(path: agent.socketPath)
                if try await holder.exchange("PING") == "PONG" {
                    holders.append(holder)
                } else {
                    holder.close()
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            #expect(holders.count == 2)
            let refused = try await SocketClient.exchange(agent.socketPath, "PING\n")
            #expect(refused == ["ERR busy too many connections"])
            #expect(try await holders[0].exchange("PING") == "PONG", "admitted connections keep working")
            for holder in holders { holder.close() }
            var answered = false
            for _ in 0..<50 where !answered {
                answered = try await SocketClient.exchange(agent.socketPath, "PING\n", lines: 1) == ["PONG"]
                if !answered { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(answered, "a closed connection frees its place")
        }
    }

    @Test func aHalfLineIsTimedOutButAnIdleConnectionIsKept() async throws {
        try await withProviderAndAgent(["--request-timeout", "0.5"]) { agent, _ in
            let idle = try RawSocket(path: agent.socketPath)
            #expect(try await idle.exchange("PING") == "PONG")
            let slow = try RawSocket(path: agent.socketPath)
            #expect(try await slow.exchange("PING") == "PONG")
            // Half a line, then nothing: the agent answers and closes after the request time-out.
            let replies = try await slow.sendPartialAndReadUntilClosed("GET vehi", timeout: 5000)
            #expect(replies == ["ERR bad-request request timed out"])
            try await Task.sleep(for: .seconds(1))
            #expect(try await idle.exchange("PING") == "PONG", "a connection with nothing owed is kept")
            idle.close()
            slow.close()
        }
    }

    private func providerTimeoutConfig(seconds: Int) throws -> String {
        let path = TestTemporary.path("ftd-config", suffix: ".json")
        let json = #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "timeout": \#(seconds)}}}"#
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
