import CSharedMemory
import FleetTokenClient
import Foundation
import Synchronization
import Testing
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// Readers map only what they can trust: a segment sealed against writing, growing and shrinking,
/// of the announced size and the kind asked for, whose tokens are what the agent could serve.
@Suite("Hostile segments")
struct HostileSegmentTests {
    /// A client reading shared memory, its memo off: every answer not read from memory is a GET.
    private func client(_ agent: HostileAgent) -> FleetTokenClient {
        var configuration = FleetTokenClient.Configuration()
        configuration.memoization = false
        return FleetTokenClient(socketPath: agent.socketPath, configuration: configuration)
    }

    @Test(arguments: HostileSegment.allCases)
    func theClientNeverMapsASegmentItCannotTrust(_ kind: HostileSegment) async throws {
        let (writer, descriptor) = try kind.make()
        defer { if descriptor != writer.descriptor { close(descriptor) } }
        let shm = shmReply(writer, [descriptor])
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        let client = client(agent)
        #expect(try await client.token(.vehicle("v-1")).jwt == "socket-token")
        #expect(client.sharedMemoryReads == 0)
        // Shrinking a segment the client had mapped would kill this process with SIGBUS: only
        // one it never mapped may be shrunk.
        guard client.sharedMemoryReads == 0, kind == .unsealed else { return }
        #expect(ftruncate(descriptor, 0) == 0)
        #expect(try await client.token(.vehicle("v-1")).jwt == "socket-token")
    }

    @Test(arguments: ["abc\nHIT forged", "tok\u{1B}]0;title\u{07}", "tok en"])
    func theClientNeverHandsOutASegmentTokenTheAgentCouldNotServe(_ token: String) async throws {
        let writer = try segmentHolding(token: token)
        defer { withExtendedLifetime(writer) {} }
        let shm = shmReply(writer, [writer.descriptor])
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        #expect(try await client(agent).token(.vehicle("v-1")).jwt == "socket-token")
    }

    @Test func theClientNeverHandsOutASegmentTokenWithAnImplausibleExpiry() async throws {
        let writer = try segmentHolding(token: "segment-token", unixExpiry: 1_000_000_000_000_000_000)
        defer { withExtendedLifetime(writer) {} }
        let shm = shmReply(writer, [writer.descriptor])
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        #expect(try await client(agent).token(.vehicle("v-1")).jwt == "socket-token")
    }

    /// A segment that holds `*`, `.` and `..` (as one written by an older agent might): the client
    /// reads its other tokens from it, and still refuses those ids, from memory or not, without
    /// asking the agent, however often they are asked for.
    @Test func theClientRefusesReservedIdsASegmentHolds() async throws {
        let writer = try segmentHolding(token: "segment-token")
        defer { withExtendedLifetime(writer) {} }
        let now = fsm_boottime_ns()
        let hour: UInt64 = 3_600_000_000_000
        let expiry = Int64(Date().timeIntervalSince1970) + 3600
        for id in ["*", ".", ".."] {
            #expect(
                writer.put(id: id, token: "reserved-token", expiry: now + hour, lifetime: hour, unixExpiry: expiry)
                    == .stored
            )
        }
        let shm = shmReply(writer, [writer.descriptor])
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        let client = client(agent)
        #expect(try await client.token(.vehicle("v-1")).jwt == "segment-token")
        #expect(try await client.token(.vehicle("v-1")).jwt == "segment-token")
        #expect(client.sharedMemoryReads == 2)
        let asked = agent.requests
        for _ in 0..<3 {
            for id in ["*", ".", ".."] {
                await #expect(throws: FleetTokenError.self, "\(id)") { try await client.token(.vehicle(id)) }
            }
        }
        #expect(agent.requests == asked, "the agent was asked for none of them")
        #expect(client.sharedMemoryReads == 2)
    }

    @Test func anAgentThatRefusesTheLayoutIsNotAskedAgain() async throws {
        let writer = try segmentHolding(token: "segment-token")
        defer { withExtendedLifetime(writer) {} }
        let shm = shmReply(writer, [writer.descriptor])
        let lines = Mutex<[String]>([])
        // An agent that knows only `SHM <kind>`: it would offer layout 1, which is no longer read,
        // so the client asks once, naming layout 2, and reads through the socket.
        let agent = try HostileAgent { line in
            lines.withLock { $0.append(line) }
            if line == "SHM vehicle" { return shm }
            if line.hasPrefix("SHM ") { return .line("ERR bad-request usage: SHM <kind>") }
            return plausibleTokenReply("socket-token")
        }
        defer { agent.stop() }
        let client = client(agent)
        #expect(try await client.token(.vehicle("v-1")).jwt == "socket-token")
        #expect(client.sharedMemoryReads == 0)
        #expect(lines.withLock { $0.filter { $0.hasPrefix("SHM") } } == ["SHM vehicle 2"])
    }

    @Test func aReplyWhoseLayoutIsNotTheSegmentsIsRefused() async throws {
        let writer = try segmentHolding(token: "segment-token")
        defer { withExtendedLifetime(writer) {} }
        // A layout 2 segment announced as layout 1: the client maps nothing.
        let shm = HostileAgent.Answer.line(
            "OK size=\(writer.size) layout=1 generation=\(writer.generation)",
            descriptors: [writer.descriptor]
        )
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        let client = client(agent)
        #expect(try await client.token(.vehicle("v-1")).jwt == "socket-token")
        #expect(client.sharedMemoryReads == 0)
    }
}
