import CSharedMemory
import Foundation
import Testing
import TokenSegment
import TokenWire

@testable import FleetTokenClient

#if canImport(Glibc)
    import Glibc
#endif

/// A segment of `vehicle` tokens made by the agent's own writer, its serving rule the agent's
/// defaults (minimum validity 300 s, floor 10 s, idle time-out 600 s) and its heartbeat an hour
/// ahead, so that it never goes stale while a test runs.
final class TestSegment {
    static let second: UInt64 = 1_000_000_000
    let writer: SegmentWriter

    init(kind: String = "vehicle", generation: UInt64 = 1, idleTimeout: Double = 600) throws {
        writer = try SegmentWriter(
            kind: kind,
            generation: generation,
            slotCount: 64,
            slotSize: 1024,
            policy: SegmentPolicy(minValidity: 300, servingFloor: 10, idleTimeout: idleTimeout)
        )
        writer.beat(now: fsm_boottime_ns() + 3600 * Self.second)
    }

    /// Stores `token` for `id` with `left` seconds of validity (negative: expired), a lifetime of
    /// `lifetime` seconds, and a Unix expiry of now plus `left` unless given; returns the Unix
    /// expiry stored.
    @discardableResult
    func put(_ id: String, _ token: String, left: Double = 3600, lifetime: Double = 3600, unixExpiry: Int64? = nil)
        -> Int64
    {
        let now = fsm_boottime_ns()
        let expiry = left >= 0 ? now + UInt64(left * 1e9) : now - UInt64(-left * 1e9)
        let unixExpiry = unixExpiry ?? Self.unixNow + Int64(left)
        let outcome = writer.put(
            id: id,
            token: token,
            expiry: expiry,
            lifetime: UInt64(lifetime * 1e9),
            unixExpiry: unixExpiry
        )
        #expect(outcome == .stored)
        return unixExpiry
    }

    static var unixNow: Int64 { Int64(Date().timeIntervalSince1970) }

    /// The reply to `SHM vehicle` that hands out this segment.
    var reply: WireReply { .ok("size=\(writer.size) layout=\(SegmentLayout.version) generation=\(writer.generation)") }

    /// Hands the segment to `reads` as the agent's `SHM` reply does: a read-only descriptor of the
    /// memory file, which `reads` closes.
    func hand(to reads: SegmentReads, as kind: String = "vehicle") {
        reads.received(kind: kind, reply: reply, descriptor: fsm_reopen_read_only(writer.descriptor))
    }
}

/// A copy of a writer's segment in a memory file this test can still write through the mapping it
/// made before sealing it (`F_SEAL_FUTURE_WRITE` leaves that mapping writable, as the agent's is):
/// to hold a slot's sequence counter odd, as a writer in the middle of a change does.
final class WritableCopy {
    let size: Int
    private let descriptor: Int32
    private let base: UnsafeMutableRawPointer
    private let tableOffset: Int
    private let slotSize: Int
    private let source: SegmentWriter

    init(of writer: SegmentWriter) throws {
        size = writer.size
        tableOffset = SegmentLayout.tableOffset(indexCount: writer.indexCount)
        slotSize = writer.slotSize
        source = writer
        descriptor = fsm_memfd_create("fleet-token-client-test")
        guard descriptor >= 0, ftruncate(descriptor, off_t(size)) == 0,
            let mapped = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0), mapped != MAP_FAILED
        else { throw TestFailure("a writable memory file: \(String(cString: strerror(errno)))") }
        base = mapped
        guard pread(writer.descriptor, base, size, 0) == size, fsm_seal_read_only(descriptor) == 0 else {
            throw TestFailure("copying the segment: \(String(cString: strerror(errno)))")
        }
    }

    deinit {
        munmap(base, size)
        close(descriptor)
    }

    /// The slot that holds `id`, as a reader finds it.
    func slot(of id: String) throws -> Int {
        let readOnly = fsm_reopen_read_only(descriptor)
        defer { close(readOnly) }
        let reader = try SegmentReader(descriptor: readOnly, expectedSize: size, kind: source.kind)
        guard case .found(let copy) = reader.copy(id: id) else { throw TestFailure("no slot holds \(id)") }
        return copy.slot
    }

    /// The sequence counter of `slot`.
    func sequence(ofSlot slot: Int) -> UInt64 {
        base.load(fromByteOffset: tableOffset + slot * slotSize + 8 * SegmentLayout.Slot.sequence, as: UInt64.self)
    }

    func setSequence(ofSlot slot: Int, to value: UInt64) {
        base.storeBytes(
            of: value,
            toByteOffset: tableOffset + slot * slotSize + 8 * SegmentLayout.Slot.sequence,
            as: UInt64.self
        )
    }

    func hand(to reads: SegmentReads) {
        reads.received(
            kind: source.kind,
            reply: .ok("size=\(size) layout=\(SegmentLayout.version) generation=\(source.generation)"),
            descriptor: fsm_reopen_read_only(descriptor)
        )
    }
}

/// What a lookup answered, to compare.
enum Read: Equatable, CustomStringConvertible {
    case token(String, expiresAt: Int64)
    case socket
    case miss
    case askForSegment

    init(_ answer: SegmentReads.Answer) {
        switch answer {
        case .token(let token): self = .token(token.jwt, expiresAt: Int64(token.expiresAt.timeIntervalSince1970))
        case .socket: self = .socket
        case .miss: self = .miss
        case .askForSegment: self = .askForSegment
        }
    }

    var description: String {
        switch self {
        case .token(let jwt, let expiresAt): "token \(jwt) \(expiresAt)"
        case .socket: "socket"
        case .miss: "miss"
        case .askForSegment: "ask for the segment"
        }
    }
}

extension SegmentReads {
    /// ``lookup(_:minimumValidity:)``, to compare.
    func read(_ id: String, kind: String = "vehicle", minimumValidity: Double? = nil) -> Read {
        Read(lookup(TokenSubject(kind: kind, id: id), minimumValidity: minimumValidity))
    }

    /// ``cachedToken(_:minimumValidity:)``'s JWT.
    func cached(_ id: String, kind: String = "vehicle", minimumValidity: Double? = nil) -> String? {
        cachedToken(TokenSubject(kind: kind, id: id), minimumValidity: minimumValidity)?.jwt
    }
}
