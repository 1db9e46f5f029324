import FleetTokenClient
import Foundation
import Synchronization
import Testing
import TokenWire

/// The client's fast path: pipelined callers over many keys, singleflight without tasks, the
/// connection's time-out timer, reconnection, and memo hits from the main actor.
@Suite("FleetTokenClient fast path")
struct ClientFastPathTests {
    private func client(_ agent: AgentProcess, memo: Bool, timeout: Double = 15) -> FleetTokenClient {
        var configuration = FleetTokenClient.Configuration()
        // The socket path and the memo (SharedMemoryTests covers the shared-memory path).
        configuration.sharedMemory = false
        configuration.memoization = memo
        configuration.callTimeout = timeout
        return FleetTokenClient(socketPath: agent.socketPath, configuration: configuration)
    }

    @Test func manyCallersOverManyKeysEachGetTheirOwnToken() async throws {
        try await withProviderAndAgent { agent, _ in
            let client = client(agent, memo: false)
            let connectionsBefore = try #require(try await agent.stats()["connections_total"])
            // 32 tasks, 10 calls each, over 128 subjects of two kinds: every reply must be the
            // token of the subject its call asked for, whatever the interleaving.
            let mismatches = try await withThrowingTaskGroup(of: [String].self) { group in
                for task in 0..<32 {
                    group.addTask {
                        var wrong: [String] = []
                        for call in 0..<10 {
                            let index = (task * 7 + call * 13) % 128
                            let subject: TokenSubject =
                                index % 2 == 0 ? .vehicle("pipe-\(index)") : .trip("pipe-\(index)")
                            let token = try await client.token(subject)
                            let claim = subject.kind == "trip" ? "tripid" : "vehicleid"
                            let named = jwtPart(token.jwt, 1)?["authorization"] as? [String: String]
                            if named != [claim: subject.id] {
                                wrong.append("\(subject) got \(String(describing: named))")
                            }
                        }
                        return wrong
                    }
                }
                return try await group.reduce(into: [String]()) { $0 += $1 }
            }
            #expect(mismatches == [])
            let stats = try await client.stats()
            #expect(stats["connections_total"] == connectionsBefore + 1, "one pipelined connection carried everything")
        }
    }

    @Test func aBurstLargerThanTheSocketBufferIsWrittenWhole() async throws {
        try await withProviderAndAgent { agent, _ in
            let client = client(agent, memo: false)
            let current = try await client.token(.vehicle("burst-1"))
            // 500 requests of about 4 KiB each (a long refused token): 2 MiB queued at once, far
            // beyond what the socket holds, so writes stop for room and resume.
            let padding = String(repeating: "x", count: 3900)
            let answered = try await withThrowingTaskGroup(of: Bool.self) { group in
                for index in 0..<500 {
                    group.addTask {
                        let refused = Token(jwt: "\(padding)\(index)", expiresAt: current.expiresAt)
                        return try await client.refresh(.vehicle("burst-1"), replacing: refused) == current
                    }
                }
                return try await group.reduce(into: 0) { $0 += $1 ? 1 : 0 }
            }
            #expect(answered == 500, "each refused token was not the cached one: the cached one came back")
        }
    }

    @Test func joinedCallersShareTheLeadersError() async throws {
        try await withProviderAndAgent { agent, provider in
            let client = client(agent, memo: false)
            provider.setDelay(milliseconds: 300)
            let errors = await withTaskGroup(of: FleetTokenError?.self) { group in
                for _ in 0..<20 {
                    group.addTask {
                        do {
                            _ = try await client.token(.vehicle("status503-shared"))
                            return nil
                        } catch {
                            return error as? FleetTokenError
                        }
                    }
                }
                return await group.reduce(into: [FleetTokenError?]()) { $0.append($1) }
            }
            #expect(errors.count == 20)
            #expect(errors.allSatisfy { $0 == .unavailable("HTTP 503") })
            #expect(client.localCounters.requests < 20, "callers joined a request in flight")
        }
    }

    @Test func timeOutsExpireEveryCallQueuedBehindAndRetireTheConnection() async throws {
        try await withProviderAndAgent { agent, _ in
            // Cached first (outside the client's 2 s time-out), so these calls are quick hits even
            // on a loaded machine: only the hanging one times out for its own reason.
            _ = try await agent.send("GET vehicle before-hang", "GET vehicle after-hang")
            let client = client(agent, memo: false, timeout: 2)
            _ = try await client.token(.vehicle("before-hang"))
            let connectionsBefore = try #require(try await agent.stats()["connections_total"])
            // One call hangs at the provider; the calls pipelined behind it wait for its reply
            // on the same connection, so every one of them times out.
            let outcomes = await withTaskGroup(of: String.self) { group in
                group.addTask {
                    do {
                        _ = try await client.token(.vehicle("hang-fast"))
                        return "answered"
                    } catch {
                        return "\(error)"
                    }
                }
                for index in 0..<8 {
                    group.addTask {
                        do {
                            _ = try await client.token(.vehicle("behind-\(index)"))
                            return "answered"
                        } catch {
                            return "\(error)"
                        }
                    }
                }
                return await group.reduce(into: [String]()) { $0.append($1) }
            }
            #expect(outcomes.contains { $0.hasPrefix("timed out") })
            #expect(outcomes.allSatisfy { $0 == "answered" || $0.hasPrefix("timed out") }, "\(outcomes)")
            // Whatever timed out, the next call goes out on a fresh connection and is answered.
            let token = try await client.token(.vehicle("after-hang"))
            #expect(jwtPart(token.jwt, 1)?["authorization"] as? [String: String] == ["vehicleid": "after-hang"])
            let connectionsAfter = try #require(try await agent.stats()["connections_total"])
            #expect(connectionsAfter >= connectionsBefore + 2, "the retired connection was not reused")
        }
    }

    @Test func aReleasedClientClosesItsConnectionsEvenARetiredOne() async throws {
        try await withProviderAndAgent { agent, _ in
            // Cached first, so the call after the time-out is a quick hit even on a loaded machine.
            _ = try await agent.send("GET vehicle open-release")
            do {
                let client = client(agent, memo: false, timeout: 1)
                // The timed-out call retires its connection, whose late reply never comes; nothing
                // holds that connection any more, so it must close rather than wait for the reply.
                _ = try? await client.token(.vehicle("hang-release"))
                var answered = false
                for _ in 0..<5 where !answered {
                    answered = (try? await client.token(.vehicle("open-release"))) != nil
                }
                #expect(answered, "a call after the time-out is answered on a new connection")
            }
            // Polls for the agent to see both closed: it learns of a close asynchronously.
            var open = Int.max
            for _ in 0..<100 {
                open = try await agent.stats()["connections"] ?? .max
                if open == 1 { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(open == 1, "only the STATS connection itself is left once the client is released")
        }
    }

    @Test func reconnectsAfterTheAgentRestarts() async throws {
        let provider = try await FakeTokenProvider.start()
        let arguments = ["--provider", "vehicle=\(provider.url(kind: "vehicle"))"]
        let first = try await AgentProcess(arguments)
        // The socket path and the memo, like the rest of this suite: through shared memory, a
        // killed agent's segment goes stale and the client asks the new agent instead
        // (SharedMemoryTests covers readers across restarts).
        var configuration = FleetTokenClient.Configuration()
        configuration.sharedMemory = false
        let client = FleetTokenClient(socketPath: first.socketPath, configuration: configuration)
        let before = try await client.token(.vehicle("restart-1"))
        kill(first.pid, SIGKILL)
        _ = await first.stop()
        let second = try await AgentProcess(arguments, socketPath: first.socketPath)
        let connectionsBefore = try #require(try await second.stats()["connections_total"])
        // The memo still answers the old token; a call it cannot answer reconnects.
        #expect(try await client.token(.vehicle("restart-1")) == before)
        let fresh = try await client.token(.vehicle("restart-2"))
        #expect(provider.issuedTokens.contains(fresh.jwt))
        try await client.ping()
        let stats = try await client.stats()
        #expect(stats["connections_total"] == connectionsBefore + 1, "one new connection to the new agent")
        await second.stop()
        await provider.stop()
    }

    @Test func memoHitFromTheMainActor() async throws {
        try await withProviderAndAgent { agent, _ in
            try await Self.callFromTheMainActor(client(agent, memo: true))
        }
    }

    @MainActor private static func callFromTheMainActor(_ client: FleetTokenClient) async throws {
        // A miss from the main actor waits for the agent and comes back to the main actor.
        let first = try await client.token(.vehicle("main-1"))
        MainActor.assertIsolated()
        for _ in 0..<1000 {
            let again = try await client.token(.vehicle("main-1"))
            #expect(again == first)
        }
        MainActor.assertIsolated()
        #expect(client.localCounters.memoHits == 1000)
        #expect(client.localCounters.requests == 1)
        _ = try await client.token(.vehicle("main-1"), minimumValidity: 3600)
        #expect(client.localCounters.requests == 2, "more validity than remembered: asked the agent")
    }

    @Test func defaultSocketPathComesFromTokenWire() {
        #expect(
            FleetTokenClient.defaultSocketPath
                == AgentDefaults.socketPath(environment: ProcessInfo.processInfo.environment)
        )
    }
}
