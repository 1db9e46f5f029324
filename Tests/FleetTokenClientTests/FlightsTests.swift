import Foundation
import Testing

@testable import FleetTokenClient

/// ``Flights``: concurrent callers asking the same share the first caller's request.
///
/// Joiners start with `Task.immediate`, which runs them on the test's thread up to their first
/// suspension: the wait in ``Flights/join(_:)``, whose continuation is queued by then. So every
/// joiner has joined before the test lands the flight, with no sleep. A joiner that had not would
/// find no flight, lead one of its own and ask the agent, which no test has: it would fail.
@Suite("Client: flights")
struct FlightsTests {
    private let vehicle = TokenSubject.vehicle("v-1")
    private let token = Token(jwt: "shared-token", expiresAt: Date(timeIntervalSinceNow: 3600))

    @Test func onlyTheFirstCallerLeads() {
        let flights = Flights()
        let key = Flights.Key(subject: vehicle, minimumValidity: nil)
        #expect(flights.lead(key))
        #expect(!flights.lead(key), "a flight is in the air for the key")
        #expect(flights.lead(Flights.Key(subject: vehicle, minimumValidity: 600)), "another validity is another key")
        #expect(flights.lead(Flights.Key(subject: .trip("v-1"), minimumValidity: nil)), "another kind too")
        flights.land(key, with: .success(token))
        #expect(flights.lead(key), "a landed flight is over")
    }

    @Test func everyJoinerGetsTheLeadersToken() async {
        let flights = Flights()
        let key = Flights.Key(subject: vehicle, minimumValidity: nil)
        #expect(flights.lead(key))
        let joiners = (0..<4).map { _ in Task.immediate { await flights.join(key) } }
        flights.land(key, with: .success(token))
        for joiner in joiners { #expect(await joiner.value == .success(token)) }
        #expect(await flights.join(key) == nil, "no flight left to join")
    }

    @Test func aFailedFlightFailsEveryJoinerAndTheNextCallerLeadsANewOne() async {
        let flights = Flights()
        let key = Flights.Key(subject: vehicle, minimumValidity: nil)
        #expect(flights.lead(key))
        let joiners = (0..<3).map { _ in Task.immediate { await flights.join(key) } }
        flights.land(key, with: .failure(.unavailable("provider down")))
        for joiner in joiners { #expect(await joiner.value == .failure(.unavailable("provider down"))) }
        #expect(flights.lead(key), "the failure is not kept: the next caller leads")
        let later = Task.immediate { await flights.join(key) }
        flights.land(key, with: .success(token))
        #expect(await later.value == .success(token))
    }

    // MARK: Through the client

    /// A client whose agent cannot be reached, and gives up at once: a call that sends a request
    /// fails with `agentUnreachable` and counts it.
    private func unreachableClient() -> FleetTokenClient {
        var configuration = FleetTokenClient.Configuration()
        configuration.sharedMemory = false
        configuration.reconnectDeadline = 0
        return FleetTokenClient(socketPath: "/nonexistent/fleet-tokend-test.sock", configuration: configuration)
    }

    /// The test leads the client's flight, as a first caller whose request is on its way would:
    /// concurrent calls wait for it and send nothing.
    @Test func concurrentCallsShareTheFlightInTheAir() async throws {
        let client = unreachableClient()
        let vehicle = self.vehicle
        #expect(client.flights.lead(Flights.Key(subject: vehicle, minimumValidity: nil)))
        // A minimum validity is rounded up to whole seconds, as it is sent: 299.2 flies with 300.
        #expect(client.flights.lead(Flights.Key(subject: vehicle, minimumValidity: 300)))
        let callers = (0..<3).map { _ in Task.immediate { try await client.token(vehicle) } }
        let rounded = Task.immediate { try await client.token(vehicle, minimumValidity: 299.2) }
        client.flights.land(Flights.Key(subject: vehicle, minimumValidity: nil), with: .success(token))
        let other = Token(jwt: "other-token", expiresAt: Date(timeIntervalSinceNow: 3600))
        client.flights.land(Flights.Key(subject: vehicle, minimumValidity: 300), with: .success(other))
        for caller in callers { #expect(try await caller.value == token) }
        #expect(try await rounded.value == other)
        #expect(client.localCounters.requests == 0, "no caller sent a request")
    }

    @Test func aFailedFlightFailsEveryCallerAndTheNextCallSendsItsOwnRequest() async throws {
        let client = unreachableClient()
        let vehicle = self.vehicle
        let key = Flights.Key(subject: vehicle, minimumValidity: nil)
        #expect(client.flights.lead(key))
        let callers = (0..<3).map { _ in Task.immediate { try await client.token(vehicle) } }
        client.flights.land(key, with: .failure(.rejected("unknown vehicle")))
        for caller in callers {
            await #expect(throws: FleetTokenError.rejected("unknown vehicle")) { try await caller.value }
        }
        #expect(client.localCounters.requests == 0)
        // The failure is not remembered: the next call leads a flight of its own and asks the agent.
        let error = await #expect(throws: FleetTokenError.self) { try await client.token(vehicle) }
        #expect(error?.isAgentUnreachable == true, "\(String(describing: error))")
        #expect(client.localCounters.requests == 1)
        #expect(client.flights.lead(key), "the call's own flight landed")
    }

    @Test func aCallForAnotherValidityDoesNotWaitForTheFlightInTheAir() async throws {
        let client = unreachableClient()
        let key = Flights.Key(subject: vehicle, minimumValidity: nil)
        #expect(client.flights.lead(key))
        let error = await #expect(throws: FleetTokenError.self) {
            try await client.token(vehicle, minimumValidity: 600)
        }
        #expect(error?.isAgentUnreachable == true, "\(String(describing: error))")
        #expect(client.localCounters.requests == 1)
        client.flights.land(key, with: .success(token))
    }
}

extension FleetTokenError {
    var isAgentUnreachable: Bool {
        if case .agentUnreachable = self { return true }
        return false
    }
}
