import FleetTokenClient
import Foundation
import Testing

/// Two ids that are canonically equivalent Unicode (a precomposed `é`, and `e` with a combining
/// accent) but different bytes are different ids to the agent, the provider and Fleet Engine.
/// Swift's `String ==` calls them equal; nothing that keys tokens may.
@Suite("Ids are their bytes")
struct IdentityBytesTests {
    private let precomposed = "caf\u{E9}-1"
    private let decomposed = "cafe\u{301}-1"

    /// The id the token's `authorization` claim names, as bytes.
    private func claimedID(_ jwt: String) -> [UInt8]? {
        (jwtPart(jwt, 1)?["authorization"] as? [String: String])?["vehicleid"].map { Array($0.utf8) }
    }

    @Test func canonicallyEquivalentIdsAreDifferentSubjects() {
        #expect(precomposed == decomposed, "String == calls them equal")
        #expect(TokenSubject.vehicle(precomposed) != TokenSubject.vehicle(decomposed))
        #expect(Set([TokenSubject.vehicle(precomposed), .vehicle(decomposed), .vehicle(precomposed)]).count == 2)
        #expect(TokenSubject.vehicle(precomposed) == TokenSubject.vehicle("caf\u{E9}-1"))
    }

    @Test func theAgentFetchesEachIdItsOwnTokenEvenWhenBothAreInFlight() async throws {
        // A slow provider keeps the first fetch in flight while the second id is asked for.
        try await withProviderAndAgent(configure: { $0.setDelay(milliseconds: 500) }) { agent, _ in
            async let first = agent.send("GET vehicle \(precomposed)")
            async let second = agent.send("GET vehicle \(decomposed)")
            let replies = try await [first, second]
            let firstToken = try #require(tokenOf(replies[0].first), "\(replies[0])")
            let secondToken = try #require(tokenOf(replies[1].first), "\(replies[1])")
            #expect(claimedID(firstToken) == Array(precomposed.utf8))
            #expect(claimedID(secondToken) == Array(decomposed.utf8))
        }
    }

    @Test(arguments: [false, true])
    func theClientAnswersEachIdItsOwnToken(sharedMemory: Bool) async throws {
        try await withProviderAndAgent(configure: { $0.setDelay(milliseconds: 500) }) { agent, _ in
            var configuration = FleetTokenClient.Configuration()
            configuration.sharedMemory = sharedMemory
            let client = FleetTokenClient(socketPath: agent.socketPath, configuration: configuration)
            // Concurrent first calls (one flight each), then repeated ones (memo or memory).
            async let first = client.token(.vehicle(precomposed))
            async let second = client.token(.vehicle(decomposed))
            let tokens = try await [first, second]
            #expect(claimedID(tokens[0].jwt) == Array(precomposed.utf8))
            #expect(claimedID(tokens[1].jwt) == Array(decomposed.utf8))
            for _ in 0..<3 {
                #expect(claimedID(try await client.token(.vehicle(precomposed)).jwt) == Array(precomposed.utf8))
                #expect(claimedID(try await client.token(.vehicle(decomposed)).jwt) == Array(decomposed.utf8))
            }
        }
    }
}
