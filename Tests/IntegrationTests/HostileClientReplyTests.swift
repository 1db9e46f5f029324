import CSharedMemory
import FleetTokenClient
import Foundation
import Testing
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A token reply the agent could never send, as raw bytes: each is an error, never a token.
struct ImplausibleTokenReply: Sendable, CustomTestStringConvertible {
    var testDescription: String
    /// The reply line (LF added), given the Unix time in an hour.
    var line: @Sendable (_ inAnHour: Int64) -> [UInt8]

    static let all: [ImplausibleTokenReply] = [
        .init(testDescription: "ESC") { Array("OK sekrit\u{1B}]0;title\u{07} \($0)".utf8) },
        .init(testDescription: "CR") { Array("OK sekrit\rforged \($0)".utf8) },
        .init(testDescription: "invalid UTF-8") { Array("OK sekrit".utf8) + [0xFF, 0xFE] + Array(" \($0)".utf8) },
        .init(testDescription: "over 16 KiB") {
            Array("OK sekrit\(String(repeating: "a", count: 16 * 1024)) \($0)".utf8)
        },
        .init(testDescription: "expiry 10^18") { _ in Array("OK sekrit 1000000000000000000".utf8) },
        .init(testDescription: "expiry in 1970") { _ in Array("OK sekrit 5".utf8) },
        .init(testDescription: "expiry a year ahead") { Array("OK sekrit \($0 + 365 * 86_400)".utf8) },
    ]

    var answer: HostileAgent.Answer { .reply(line(Int64(Date().timeIntervalSince1970) + 3600) + [0x0A]) }
}

/// The client trusts nothing that answers on the socket: every line is bounded, descriptors that
/// ride with replies that carry none are closed, and a token is only what the agent could serve.
@Suite("Hostile replies to the client")
struct HostileClientReplyTests {
    /// A client of the socket alone (no memo, no shared memory unless asked for).
    private func client(
        _ agent: HostileAgent,
        sharedMemory: Bool = false,
        callTimeout: Double = 10
    ) -> FleetTokenClient {
        var configuration = FleetTokenClient.Configuration()
        configuration.memoization = false
        configuration.sharedMemory = sharedMemory
        configuration.callTimeout = callTimeout
        return FleetTokenClient(socketPath: agent.socketPath, configuration: configuration)
    }

    private func failure(_ body: () async throws -> Void) async -> FleetTokenError? {
        do {
            try await body()
            return nil
        } catch {
            return error as? FleetTokenError ?? .badRequest("not a FleetTokenError: \(error)")
        }
    }

    @Test func aReplyWithNoNewlineFailsAfterTheLineLimitWithoutGrowing() async throws {
        let agent = try HostileAgent { _ in .endless(Array(repeating: UInt8(ascii: "a"), count: 4096)) }
        defer { agent.stop() }
        let error = await failure { _ = try await client(agent).token(.vehicle("v-1")) }
        guard case .invalidReply(let text) = error else {
            Issue.record("expected invalidReply, got \(String(describing: error))")
            return
        }
        #expect(text.contains("over \(WireLimits.maxReplyLineBytes) bytes"))
        // The line limit, and what the socket buffers of both ends held when the client closed.
        #expect(agent.bytesWritten < 4 * 1024 * 1024, "\(agent.bytesWritten) bytes sent before the client gave up")
        #expect(agent.requests == 1, "not retried")
    }

    @Test func anEndlessMetricsReplyFailsAtItsLimit() async throws {
        let agent = try HostileAgent { _ in .endless(Array(String(repeating: "# HELP x y\n", count: 400).utf8)) }
        defer { agent.stop() }
        // 8 MiB to read before the limit: a debug build on a loaded machine needs more than 10 s.
        let error = await failure { _ = try await client(agent, callTimeout: 60).metrics() }
        guard case .invalidReply(let text) = error else {
            Issue.record("expected invalidReply, got \(String(describing: error))")
            return
        }
        #expect(text.contains("METRICS reply over"))
        #expect(agent.bytesWritten < WireLimits.maxMetricsReplyBytes + 4 * 1024 * 1024)
    }

    @Test func descriptorsRidingWithOrdinaryRepliesAreClosed() async throws {
        let name = "ftd-attached-\(UUID().uuidString.prefix(8))"
        let attached = fsm_memfd_create(name)
        try #require(attached >= 0)
        defer { close(attached) }
        // Every GET reply carries the descriptor, and PING's carries it twice.
        let agent = try HostileAgent { line in
            line == "PING"
                ? .line("PONG", descriptors: [attached, attached])
                : plausibleTokenReply("socket-token", descriptors: [attached])
        }
        defer { agent.stop() }
        let client = client(agent)
        for index in 0..<100 { _ = try await client.token(.vehicle("v-\(index)")) }
        try await client.ping()
        #expect(openDescriptors(naming: name) == 1, "the hostile agent's own, and no copy the client received")
    }

    @Test func descriptorsBeyondTheOneAnSHMReplyCarriesAreClosed() async throws {
        let name = "ftd-extra-\(UUID().uuidString.prefix(8))"
        let extra = fsm_memfd_create(name)
        try #require(extra >= 0)
        defer { close(extra) }
        let writer = try segmentHolding(token: "segment-token")
        defer { withExtendedLifetime(writer) {} }
        let shm = shmReply(writer, [writer.descriptor, extra, extra])
        let agent = try HostileAgent { line in line.hasPrefix("SHM ") ? shm : plausibleTokenReply("socket-token") }
        defer { agent.stop() }
        let client = client(agent, sharedMemory: true)
        #expect(try await client.token(.vehicle("v-1")).jwt == "segment-token")
        #expect(openDescriptors(naming: name) == 1, "the hostile agent's own, and no copy the client received")
    }

    @Test(arguments: ImplausibleTokenReply.all)
    func aTokenTheAgentCouldNotServeIsAnError(_ reply: ImplausibleTokenReply) async throws {
        let agent = try HostileAgent { _ in reply.answer }
        defer { agent.stop() }
        let error = await failure { _ = try await client(agent).token(.vehicle("v-1")) }
        guard case .invalidReply(let text) = error else {
            Issue.record("expected invalidReply, got \(String(describing: error))")
            return
        }
        #expect(!text.contains("sekrit"), "the error never holds the token: \(text)")
    }
}
