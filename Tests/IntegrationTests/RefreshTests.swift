import Foundation
import TestSupport
import Testing

@Suite("Refresh and provider outages")
struct RefreshTests {
    @Test func backgroundRefreshHappensBeforeExpiry() async throws {
        // 24 s tokens: the refresh is due at 12 s, up to 1.2 s earlier with jitter; the refresher
        // wakes every second. Waited for as an event: the provider's second request for r-1.
        try await withProviderAndAgent(configure: { $0.setLifetime(24) }) { agent, provider in
            let first = try #require(tokenOf(try await agent.send("GET vehicle r-1").first))
            #expect(try await agent.send("GET vehicle r-1").first.flatMap(tokenOf) == first, "cached")
            // The refresh has ended once the agent counts one started and none in flight (the
            // provider counts the request before the agent holds its reply).
            let refreshed = try await eventually(every: .milliseconds(50)) {
                let stats = try await agent.stats()
                return stats["refreshes"] == 1 && stats["inflight"] == 0
            }
            #expect(refreshed, "refreshed in the background")
            #expect(provider.requests(for: "r-1") == 2, "no client asked")
            let second = try #require(tokenOf(try await agent.send("GET vehicle r-1").first))
            #expect(second != first)
            let stats = try await agent.stats()
            #expect(stats["refreshes"] == 1)
            #expect(stats["misses"] == 1, "the refreshed token was served without waiting")
        }
    }

    @Test func providerDownKeepsCachedTokensServed() async throws {
        // The provider's time-out is not the subject here ("down" is an immediate 503): it only
        // bounds a hang, so a loaded machine's slow first fetch is never taken for a failure.
        try await withProviderAndAgent(["--config", try timeoutConfig(seconds: 300)]) { agent, provider in
            let token = try #require(tokenOf(try await agent.send("GET vehicle d-1").first))
            provider.setDown(true)
            #expect(try await agent.send("GET vehicle d-1").first.flatMap(tokenOf) == token)
            // Ask for more validity than the cached token has (no re-fetch guard here): the fetch
            // fails, and the cached token is still served.
            #expect(try await agent.send("GET vehicle d-1 3600").first.flatMap(tokenOf) == token)
            #expect(provider.requests(for: "d-1") == 2)
            let refresh = try await agent.send("REFRESH vehicle d-1")
            #expect(refresh.first?.hasPrefix("ERR unavailable") == true, "REFRESH wants a fresh token")
            #expect(tokenOf(try await agent.send("GET vehicle d-1").first) == token)
            let stats = try await agent.stats()
            #expect(stats["fetch_errors"]! >= 1)
            #expect(stats["served_after_failure"]! >= 1)
            #expect(try await agent.send("GET vehicle d-2").first?.hasPrefix("ERR unavailable") == true)
            provider.setDown(false)
        }
    }

    @Test func hangingProviderTimesOutAndCachedTokenIsServed() async throws {
        try await withProviderAndAgent(["--config", try timeoutConfig(seconds: 3)]) { agent, provider in
            // The first token, however many tries a loaded machine needs within the 3 s time-out
            // (the subject is the time-out of the fetch below, not this one).
            var first: String?
            #expect(
                try await eventually(every: .milliseconds(200)) {
                    first = tokenOf(try await agent.send("GET vehicle h-1").first)
                    return first != nil
                }
            )
            let token = try #require(first)
            let requests = provider.requests(for: "h-1")
            let errors = try #require(try await agent.stats()["fetch_errors"])
            // The provider answers in 30 s, with a new token; its time-out is 3 s. The cached token
            // back, with the fetch counted as failed, is the time-out's doing, however slow the
            // machine: waiting for the provider would have brought the new token.
            provider.setDelay(milliseconds: 30_000)
            #expect(try await agent.send("GET vehicle h-1 3600").first.flatMap(tokenOf) == token)
            #expect(provider.requests(for: "h-1") == requests + 1)
            #expect(try await agent.stats()["fetch_errors"] == errors + 1, "the fetch timed out")
        }
    }

    @Test func aRefreshWithinTheGuardDoesNotFetchAgain() async throws {
        try await withProviderAndAgent(["--config", try guardConfig(seconds: 300)]) { agent, provider in
            let first = try #require(tokenOf(try await agent.send("GET trip rf-1").first))
            let replies = try await agent.send("REFRESH trip rf-1", "REFRESH trip rf-1")
            #expect(replies.map(tokenOf) == [first, first], "fetched within the guard: not fetched again")
            #expect(provider.requests(for: "rf-1") == 1)
        }
    }

    @Test func concurrentRefreshesPastTheGuardShareOneFetch() async throws {
        // A 2 s guard, waited out once (the sleep only has to last 2 s: the guard counts from
        // the fetch, which ended before its reply came). Twenty REFRESHes, pipelined in one
        // write, reach the agent in one read: the first starts a fetch (1.5 s), the others join
        // it, or, taken after it ended, are within the guard and get its token without a fetch.
        // (Across connections, the same sharing is held by the refused-token test below and,
        // on an injected clock, by the engine's tests.)
        try await withProviderAndAgent(["--config", try guardConfig(seconds: 2)]) { agent, provider in
            let first = try #require(tokenOf(try await agent.send("GET trip rf-2").first))
            try await Task.sleep(for: .seconds(2.2))
            provider.setDelay(milliseconds: 1500)
            let replies = try await SocketClient.exchange(
                agent.socketPath,
                String(repeating: "REFRESH trip rf-2\n", count: 20),
                lines: 20
            )
            let tokens = Set(replies.map(tokenOf))
            #expect(replies.count == 20)
            #expect(tokens.count == 1, "one token for every REFRESH: \(replies)")
            #expect(tokens.first! != first)
            #expect(provider.requests(for: "rf-2") == 2, "concurrent REFRESHes share one fetch")
        }
    }

    @Test func refreshWithTheRefusedTokenFetchesOnceForEveryone() async throws {
        try await withProviderAndAgent { agent, provider in
            let refused = try #require(tokenOf(try await agent.send("GET vehicle rt-1").first))
            // Within the 5 s guard a plain REFRESH would not fetch; naming the refused token does.
            let replies = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<50 {
                    group.addTask { try await agent.send("REFRESH vehicle rt-1 \(refused)").first.flatMap(tokenOf) }
                }
                return try await group.reduce(into: Set<String?>()) { $0.insert($1) }
            }
            #expect(replies.count == 1)
            let fresh = try #require(replies.first ?? nil)
            #expect(fresh != refused)
            #expect(provider.requests(for: "rt-1") == 2, "fifty refused workers, one fetch")
            #expect(try await agent.send("GET vehicle rt-1").first.flatMap(tokenOf) == fresh)
        }
    }

    @Test func aTokenThatAgesWhileItsReplyWaitsIsLookedUpAgain() async throws {
        // Replies go out in request order: a cached token answered behind a slow fetch waits
        // with it. One that fell under 10 s left meanwhile is not sent; it is looked up again.
        // 15 s tokens behind a 5.5 s fetch: the warm one has 9.5 s left, a fresh one 15.
        try await withProviderAndAgent(configure: { $0.setLifetime(15) }) { agent, provider in
            let warm = try #require(tokenOf(try await agent.send("GET vehicle aged-1").first))
            let replies = try await agent.send("GET vehicle delay5500-1", "GET vehicle aged-1")
            #expect(tokenOf(replies.first) != nil)
            let second = try #require(replies.last)
            let token = try #require(tokenOf(second), "\(second)")
            #expect(token != warm, "the aged token is not sent")
            let expiresAt = try #require(Int(second.split(separator: " ")[2]))
            #expect(expiresAt - Int(Date().timeIntervalSince1970) >= 10)
            // At least the one look-up again; one more when a loaded machine was slow enough to
            // age the first token under 10 s before the pair was sent.
            #expect(provider.requests(for: "aged-1") >= 2)
        }
    }

    private func guardConfig(seconds: Int) throws -> String {
        let path = TestTemporary.path("ftd-config", suffix: ".json")
        try #"{"refetch_guard": \#(seconds)}"#.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// A config with the vehicle provider's time-out (the URL is replaced by the test's fake
    /// provider) and no refetch guard.
    private func timeoutConfig(seconds: Int) throws -> String {
        let path = TestTemporary.path("ftd-config", suffix: ".json")
        let json =
            #"{"providers": {"vehicle": {"url": "http://127.0.0.1:1/{id}", "timeout": \#(seconds)}}, "refetch_guard": 0}"#
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}
