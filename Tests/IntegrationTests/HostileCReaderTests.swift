import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The C reader of Examples/shm-reader maps only what it can trust and prints only tokens it
/// checked.
@Suite("Hostile segments and the C reader", .enabled(if: CReader.available, "needs a C compiler"))
struct HostileCReaderTests {
    @Test(arguments: [HostileSegment.unsealed, .writable, .growable, .otherKind])
    func theCReaderNeverMapsASegmentItCannotTrust(_ kind: HostileSegment) async throws {
        let (writer, descriptor) = try kind.make()
        defer { if descriptor != writer.descriptor { close(descriptor) } }
        let shm = shmReply(writer, [descriptor])
        let agent = try HostileAgent { _ in shm }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting?.hasPrefix("NOSEGMENT ") == true, "\(reader.greeting ?? "no greeting")")
    }

    @Test(
        arguments: [
            ("abc\nHIT forged", nil), ("tok\u{1B}[2J", nil), ("segment-token", 1_000_000_000_000_000_000),
            ("segment-token", 5),
        ] as [(String, Int64?)]
    )
    func theCReaderNeverPrintsATokenTheAgentCouldNotServe(_ token: String, _ unixExpiry: Int64?) async throws {
        let writer = try segmentHolding(token: token, unixExpiry: unixExpiry)
        defer { withExtendedLifetime(writer) {} }
        let shm = shmReply(writer, [writer.descriptor])
        let agent = try HostileAgent { _ in shm }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting?.hasPrefix("SEGMENT ") == true, "\(reader.greeting ?? "no greeting")")
        let answer = try await reader.ask("v-1")
        #expect(answer?.hasPrefix("UNUSABLE ") == true, "\(answer ?? "no answer")")
        // The next answer is the next id's, not a line the token made.
        #expect(try await reader.ask("v-2") == "MISS")
    }

    @Test func theCReaderPrintsWhatAnSHMReplyHoldsEscaped() async throws {
        let agent = try HostileAgent { _ in .line("ERR denied \u{1B}]0;title\u{07}") }
        defer { agent.stop() }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting == "NOSEGMENT ERR denied ?]0;title?")
    }
}
