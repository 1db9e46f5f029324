import FleetTokenClient
import Foundation
import Testing
import TokenWire

/// `WARM` against the real agent and a fake provider: the reply at once, the fetches it starts,
/// what it refuses, and the client's `warm`.
@Suite("WARM")
struct WarmTests {
    @Test func warmAnswersAtOnceAndTheGetsAfterItAreServedFromTheCache() async throws {
        try await withProviderAndAgent { agent, provider in
            // A WARM is acted on when read: pipelined behind this GET, it would find c-1 in flight.
            #expect(tokenOf(try await agent.send("GET vehicle c-1").first) != nil)
            let replies = try await agent.send("WARM vehicle c-1 w-1 w-2 w-1", "WARM trip t-1", "WARM vehicle w-3 w-4")
            #expect(replies[0] == "OK queued=2 cached=1", "repeated ids count once")
            #expect(replies[1] == "OK queued=1 cached=0")
            #expect(replies[2] == "OK queued=2 cached=0")
            #expect(await waitFor { provider.requests(for: "w-1") == 1 && provider.requests(for: "w-2") == 1 })
            #expect(await waitFor { (try? await agent.stats())?["inflight"] == 0 })
            let before = try await agent.stats()
            let gets = try await agent.send("GET vehicle w-1", "GET vehicle w-2", "GET trip t-1", "WARM vehicle w-1")
            #expect(gets.prefix(3).allSatisfy { tokenOf($0) != nil }, "\(gets)")
            #expect(gets[3] == "OK queued=0 cached=1")
            let after = try await agent.stats()
            #expect(after["hits"] == (before["hits"] ?? 0) + 3, "served from the cache")
            #expect(after["fetches"] == before["fetches"], "no new fetch")
            #expect(after["warm_fetches"] == 5)
            #expect(provider.requests(for: "w-1") == 1 && provider.requests(for: "t-1") == 1)
        }
    }

    @Test func warmRefusesWhatGetRefusesAndMoreThanSixtyFourIds() async throws {
        try await withProviderAndAgent { agent, provider in
            let ids = (0..<64).map { "m-\($0)" }
            let replies = try await agent.send(
                "WARM vehicle",
                "WARM vehicle *",
                "WARM vehicle ok-1 ..",
                "WARM vehicle ＊",
                "WARM nope a",
                "WARM Vehicle a",
                "WARM vehicle " + (ids + ["m-64"]).joined(separator: " "),
                "WARM vehicle " + ids.joined(separator: " "),
                "warm vehicle a/b"
            )
            #expect(replies[0] == "ERR bad-request usage: WARM <kind> <id> [<id> ...]")
            #expect(replies[1] == "ERR bad-id id * is a wildcard")
            #expect(replies[2] == "ERR bad-id id .. is a dot segment")
            #expect(replies[3] == "ERR bad-id id ＊ is the wildcard * once normalised")
            #expect(replies[4].hasPrefix("ERR bad-kind kind nope is not configured"))
            #expect(replies[5] == "ERR bad-kind kind must be 1 to 32 of a-z, 0-9 and -")
            #expect(replies[6] == "ERR bad-request too many ids; at most 64")
            #expect(replies[7] == "OK queued=64 cached=0")
            #expect(replies[8] == "ERR bad-id id contains one of / : ? # or a backslash")
            #expect(await waitFor { provider.requests(for: "m-63") == 1 })
            #expect(provider.requests(for: "m-64") == 0 && provider.requests(for: "ok-1") == 0)
            #expect(provider.requests(for: "*") == 0)
        }
    }

    @Test func theClientWarmsByKindInLinesOfAtMostSixtyFour() async throws {
        try await withProviderAndAgent { agent, provider in
            let client = FleetTokenClient(socketPath: agent.socketPath)
            _ = try await client.token(.vehicle("x-0"))
            let subjects = (0..<70).map { TokenSubject.vehicle("x-\($0)") } + [.trip("y-1"), .vehicle("x-1")]
            let result = try await client.warm(subjects)
            #expect(result == WarmResult(queued: 70, cached: 1))
            #expect(try await client.warm([]) == WarmResult())
            await #expect(throws: FleetTokenError.self) { try await client.warm([.vehicle("ok"), .vehicle("*")]) }
            #expect(await waitFor { provider.requests(for: "x-69") == 1 && provider.requests(for: "y-1") == 1 })
            #expect(await waitFor { (try? await agent.stats())?["inflight"] == 0 })
            #expect(try await client.token(.trip("y-1")).jwt.isEmpty == false)
            #expect(provider.requests(for: "y-1") == 1, "served from the agent's cache")
            #expect(provider.requests(for: "ok") == 0, "nothing sent for a call with a bad id")
        }
    }
}

/// Polls `condition` (which may ask the agent) every 20 ms for up to `seconds`.
private func waitFor(seconds: Double = 10, _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return await condition()
}
