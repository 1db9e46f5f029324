import CSharedMemory
import Foundation
import Testing
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// Segments a hostile agent hands out for `SHM vehicle`: each holds a servable token for `v-1`
/// and a heartbeat an hour ahead (never stale), so only what is wrong with it can keep a reader
/// from using it.
enum HostileSegment: String, CaseIterable, Sendable, CustomTestStringConvertible {
    /// A memory file with no seal: its owner can still write, grow or shrink it.
    case unsealed
    /// Sealed against growing and shrinking, but still writable.
    case writable
    /// Sealed against writing and shrinking, but it can still grow.
    case growable
    /// Sealed like the agent's, but its header names the kind `trip`.
    case otherKind

    var testDescription: String { rawValue }

    /// The seals of `F_ADD_SEALS` (linux/fcntl.h), which Glibc does not export to Swift.
    private static let addSeals: Int32 = 1033
    private static let sealShrink: Int32 = 2
    private static let sealGrow: Int32 = 4
    private static let sealWrite: Int32 = 8

    /// The segment, and the memory file to hand out with it (the writer's own, or a copy).
    func make() throws -> (writer: SegmentWriter, descriptor: Int32) {
        let writer = try segmentHolding(token: "segment-token", kind: self == .otherKind ? "trip" : "vehicle")
        switch self {
        case .otherKind: return (writer, writer.descriptor)
        case .unsealed: return (writer, try Self.copy(of: writer, seals: 0))
        case .writable: return (writer, try Self.copy(of: writer, seals: Self.sealShrink | Self.sealGrow))
        case .growable: return (writer, try Self.copy(of: writer, seals: Self.sealWrite | Self.sealShrink))
        }
    }

    /// A new memory file holding `writer`'s bytes, with only `seals` added.
    static func copy(of writer: SegmentWriter, seals: Int32) throws -> Int32 {
        var bytes = [UInt8](repeating: 0, count: writer.size)
        guard bytes.withUnsafeMutableBytes({ pread(writer.descriptor, $0.baseAddress, $0.count, 0) }) == writer.size
        else { throw AgentError("pread of the segment") }
        let fd = fsm_memfd_create("ftd-hostile-copy")
        guard fd >= 0, ftruncate(fd, off_t(writer.size)) == 0,
            bytes.withUnsafeBytes({ pwrite(fd, $0.baseAddress, $0.count, 0) }) == writer.size,
            seals == 0 || fcntl(fd, addSeals, seals) == 0
        else { throw AgentError("copying the segment: \(String(cString: strerror(errno)))") }
        return fd
    }
}

/// A segment of `kind` written by the agent's own writer (sealed), holding `token` for `v-1`
/// with an hour left (or `unixExpiry`), its heartbeat an hour ahead.
func segmentHolding(token: String, kind: String = "vehicle", unixExpiry: Int64? = nil) throws -> SegmentWriter {
    let hour: UInt64 = 3_600_000_000_000
    let policy = SegmentPolicy(minValidity: 300, servingFloor: 10, idleTimeout: 600)
    let writer = try SegmentWriter(kind: kind, generation: 7, slotCount: 64, slotSize: 1024, policy: policy)
    let now = fsm_boottime_ns()
    let expiry = unixExpiry ?? Int64(Date().timeIntervalSince1970) + 3600
    #expect(writer.put(id: "v-1", token: token, expiry: now + hour, lifetime: hour, unixExpiry: expiry) == .stored)
    writer.beat(now: now + hour)
    return writer
}

/// The `SHM` reply that hands out `writer`'s segment through `descriptor`.
func shmReply(_ writer: SegmentWriter, _ descriptors: [Int32]) -> HostileAgent.Answer {
    .line(
        "OK size=\(writer.size) layout=\(SegmentLayout.version) generation=\(writer.generation)",
        descriptors: descriptors
    )
}

/// A token reply the agent could send, expiring in an hour, with `descriptors` riding on it.
func plausibleTokenReply(_ token: String, descriptors: [Int32] = []) -> HostileAgent.Answer {
    .line("OK \(token) \(Int64(Date().timeIntervalSince1970) + 3600)", descriptors: descriptors)
}
