import CSharedMemory
import Foundation
import TestSupport
import Testing

@testable import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

@Suite("Token segment: writer and reader")
struct SegmentTests {
    private let policy = SegmentPolicy(minValidity: 300, servingFloor: 10, idleTimeout: 600)
    private let hour: UInt64 = 3_600_000_000_000

    private func writer(slots: Int = 64, slotSize: Int = 1024, generation: UInt64 = 1) throws -> SegmentWriter {
        try SegmentWriter(kind: "vehicle", generation: generation, slotCount: slots, slotSize: slotSize, policy: policy)
    }

    private func reader(_ writer: SegmentWriter) throws -> SegmentReader {
        let fd = fsm_reopen_read_only(writer.descriptor)
        #expect(fd >= 0)
        defer { close(fd) }
        return try SegmentReader(descriptor: fd, expectedSize: writer.size, kind: "vehicle")
    }

    private var now: UInt64 { fsm_boottime_ns() }

    /// Now, after `writer` beats as the agent's heartbeat keeps it: a read compares the heartbeat
    /// with its own time, and a loaded machine may take seconds between a segment's making and
    /// a read.
    private func beatNow(_ writer: SegmentWriter) -> UInt64 {
        let time = now
        writer.beat(now: time)
        return time
    }

    /// Runs `body` with every entry of `writer`'s index empty, as if it held no id, then puts the
    /// index back: what is found then is found without a lookup by hash.
    private func withIndexEmptied(_ writer: SegmentWriter, _ body: () -> Void) {
        let index = UnsafeMutableRawBufferPointer(
            start: writer.base + SegmentLayout.headerSize,
            count: 8 * writer.indexCount
        )
        let saved = Array(index)
        _ = memset(index.baseAddress!, 0, index.count)
        body()
        index.copyBytes(from: saved)
    }

    @Test func aStoredTokenIsReadBackAndAReplacedOneIsGone() throws {
        let writer = try writer()
        let reader = try reader(writer)
        writer.put(
            id: "v-1",
            token: "first-token-" + String(repeating: "a", count: 300),
            expiry: now + hour,
            lifetime: hour,
            unixExpiry: 1_900_000_000
        )
        #expect(
            reader.lookup(id: "v-1", minimumValidity: nil, now: beatNow(writer))
                == .hit(token: "first-token-" + String(repeating: "a", count: 300), unixExpiry: 1_900_000_000)
        )
        #expect(reader.lookup(id: "v-2", minimumValidity: nil, now: beatNow(writer)) == .miss)
        writer.put(id: "v-1", token: "second", expiry: now + hour, lifetime: hour, unixExpiry: 1_900_000_001)
        #expect(
            reader.lookup(id: "v-1", minimumValidity: nil, now: beatNow(writer))
                == .hit(token: "second", unixExpiry: 1_900_000_001)
        )
        #expect(!segmentBytes(writer).contains(Array("first-token".utf8)), "the replaced token's bytes are zeroed")
        writer.remove(id: "v-1")
        #expect(reader.lookup(id: "v-1", minimumValidity: nil, now: beatNow(writer)) == .miss)
        #expect(!segmentBytes(writer).contains(Array("second".utf8)), "the removed token's bytes are zeroed")
    }

    @Test func validityFollowsTheAgentsRule() throws {
        let writer = try writer()
        let reader = try reader(writer)
        let start = now
        // Reads `seconds` later, with the writer's heartbeat as current as the agent keeps it.
        func read(after seconds: Double, minimumValidity: Double? = nil) -> SegmentReader.Lookup {
            let later = start + UInt64(seconds * 1e9)
            writer.beat(now: later)
            return reader.lookup(id: "short", minimumValidity: minimumValidity, now: later)
        }
        // A 60 s token: the default minimum is min(300, 60/4) = 15 s, the floor 10 s.
        writer.put(id: "short", token: "t", expiry: start + 60_000_000_000, lifetime: 60_000_000_000, unixExpiry: 1)
        #expect(read(after: 0) == .hit(token: "t", unixExpiry: 1))
        #expect(read(after: 44) == .hit(token: "t", unixExpiry: 1))
        #expect(read(after: 46) == .miss)
        #expect(read(after: 11, minimumValidity: 50) == .miss)
        #expect(read(after: 49, minimumValidity: 5) == .hit(token: "t", unixExpiry: 1))
        #expect(read(after: 51, minimumValidity: 5) == .miss, "never under the floor")
        #expect(read(after: 61, minimumValidity: 0) == .miss, "never expired")
    }

    @Test func manyKeysWithRemovalsStayFindable() throws {
        let writer = try writer(slots: 256)
        let reader = try reader(writer)
        var live: [String: String] = [:]
        var generator = SystemRandomNumberGenerator()
        for round in 0..<5000 {
            let id = "k-\(Int.random(in: 0..<150, using: &generator))"
            if Bool.random(using: &generator), live[id] != nil {
                writer.remove(id: id)
                live[id] = nil
            } else if live[id] != nil || writer.hasRoomForAnotherKey {
                let token = "tok-\(id)-\(round)"
                #expect(writer.put(id: id, token: token, expiry: now + hour, lifetime: hour, unixExpiry: 7) == .stored)
                live[id] = token
            }
        }
        for index in 0..<150 {
            let id = "k-\(index)"
            let expected: SegmentReader.Lookup = live[id].map { .hit(token: $0, unixExpiry: 7) } ?? .miss
            #expect(reader.lookup(id: id, minimumValidity: nil, now: beatNow(writer)) == expected, "\(id)")
        }
        #expect(writer.count == live.count)
    }

    @Test func aSlotHintIsTrustedOnlyWhenItsSlotHoldsTheId() throws {
        let writer = try writer(slots: 64, generation: 7)
        func read(_ id: String, hint: inout SlotHint) -> String? {
            var token: String?
            let found = Array(id.utf8).withUnsafeBytes { bytes in
                writer.withToken(id: bytes, hint: &hint) { token = String(decoding: $0, as: UTF8.self) }
            }
            #expect(found == (token != nil))
            return token
        }
        for index in 0..<40 {
            writer.put(id: "k-\(index)", token: "tok-\(index)", expiry: now + hour, lifetime: hour, unixExpiry: 7)
        }
        // A lookup without a hint finds the id by its hash and says where it is; that hint finds
        // it again and is left as it is.
        var hint = SlotHint.none
        #expect(read("k-3", hint: &hint) == "tok-3")
        let k3 = hint
        #expect(k3 != .none)
        #expect(read("k-3", hint: &hint) == "tok-3")
        #expect(hint == k3)
        // Served from the hinted slot: no hash, no probe. With the index emptied, a lookup by
        // hash finds nothing, and the hint still finds the token.
        withIndexEmptied(writer) {
            var unhinted = SlotHint.none
            #expect(read("k-3", hint: &unhinted) == nil, "the index is what a lookup by hash reads")
            #expect(read("k-3", hint: &hint) == "tok-3", "served from the hinted slot: no hash, no probe")
        }
        #expect(hint == k3)
        k3.prefetch()
        SlotHint(word: .max).prefetch()
        SlotHint(word: 0xffff << 48).prefetch()
        // Another id's slot, a slot of another mapping, an address inside a slot, slots past the
        // ones in use and past the mapping, garbage: each is a probe by hash, which gives the
        // right token and mends the hint.
        var others = SlotHint.none
        #expect(read("k-4", hint: &others) == "tok-4")
        let elsewhere = try self.writer(slots: 64, generation: 7)
        var elsewhereHint = SlotHint.none
        elsewhere.put(id: "k-3", token: "other-segment", expiry: now + hour, lifetime: hour, unixExpiry: 7)
        _ = Array("k-3".utf8).withUnsafeBytes { elsewhere.withToken(id: $0, hint: &elsewhereHint) { _ in } }
        let wrongHints = [
            others,
            elsewhereHint,
            SlotHint(word: k3.word + 8),
            SlotHint(word: k3.word &+ UInt64(writer.slotSize) * 60),
            SlotHint(word: k3.word &+ UInt64(writer.slotSize * writer.slotCount)),
            SlotHint(word: k3.word &+ UInt64(writer.slotSize) * 1_000_000),
            SlotHint(word: k3.word &- UInt64(writer.slotSize) * 1000),
            SlotHint(word: .max),
        ]
        for wrong in wrongHints {
            // Never served on the hint's word: without the index, nothing is found.
            withIndexEmptied(writer) {
                var unindexed = wrong
                #expect(read("k-3", hint: &unindexed) == nil, "\(wrong) is not trusted")
            }
            // With it, found by its hash: the hint now names k-3's slot, which only the index gave.
            var stale = wrong
            #expect(read("k-3", hint: &stale) == "tok-3", "\(wrong)")
            #expect(stale == k3, "\(wrong) found by its hash")
        }
        // The id removed and its slot reused by another id: the old hint finds nothing for it.
        writer.remove(id: "k-3")
        var removed = k3
        #expect(read("k-3", hint: &removed) == nil)
        #expect(removed == .none)
        writer.put(id: "k-new", token: "tok-new", expiry: now + hour, lifetime: hour, unixExpiry: 7)
        removed = k3
        #expect(read("k-3", hint: &removed) == nil, "the reused slot holds another id")
        var reused = k3
        #expect(read("k-new", hint: &reused) == "tok-new")
        #expect(reused == k3, "the freed slot went to the new id")
        // Random puts and removes, each id read with whatever hint its last read left.
        var live: [String: String] = [:]
        var hints: [String: SlotHint] = [:]
        var generator = SeededGenerator(seed: 20_261_126)
        for round in 0..<4000 {
            let id = "r-\(Int.random(in: 0..<30, using: &generator))"
            switch Int.random(in: 0..<3, using: &generator) {
            case 0 where live[id] != nil:
                writer.remove(id: id)
                live[id] = nil
            case 1 where live[id] != nil || writer.hasRoomForAnotherKey:
                live[id] = "tok-\(id)-\(round)"
                writer.put(id: id, token: live[id]!, expiry: now + hour, lifetime: hour, unixExpiry: 7)
            default:
                var hint = hints[id] ?? .none
                #expect(read(id, hint: &hint) == live[id], "\(id) in round \(round)")
                hints[id] = hint
            }
        }
        // A retired segment serves nothing, whatever the hint.
        var kept = SlotHint.none
        #expect(read("k-new", hint: &kept) == "tok-new")
        writer.retire()
        #expect(read("k-new", hint: &kept) == nil)
    }

    @Test func aFullSegmentAndAnOversizedTokenAreRefused() throws {
        // Layout 2: as many keys as slots (the index has twice as many entries).
        let writer = try writer(slots: 64, slotSize: 512)
        for index in 0..<64 {
            #expect(
                writer.put(id: "f-\(index)", token: "t", expiry: now + hour, lifetime: hour, unixExpiry: 1) == .stored
            )
        }
        #expect(writer.put(id: "f-64", token: "t", expiry: now + hour, lifetime: hour, unixExpiry: 1) == .full)
        writer.remove(id: "f-3")
        #expect(
            writer.put(id: "f-64", token: "t", expiry: now + hour, lifetime: hour, unixExpiry: 1) == .stored,
            "a removed key's slot is reused"
        )
        #expect(
            try reader(writer).lookup(id: "f-64", minimumValidity: nil, now: beatNow(writer))
                == .hit(token: "t", unixExpiry: 1)
        )
        #expect(
            writer.put(id: "f-1", token: "u", expiry: now + hour, lifetime: hour, unixExpiry: 1) == .stored,
            "a held key is replaced"
        )
        #expect(
            writer.put(
                id: "f-2",
                token: String(repeating: "x", count: 500),
                expiry: now + hour,
                lifetime: hour,
                unixExpiry: 1
            ) == .tooLarge
        )
    }

    @Test func retiringFlagsTheSegmentAndWipesItsTokens() throws {
        let writer = try writer()
        let reader = try reader(writer)
        writer.put(id: "v-1", token: "retired-secret", expiry: now + hour, lifetime: hour, unixExpiry: 1)
        writer.retire()
        #expect(reader.isRetired)
        #expect(reader.lookup(id: "v-1", minimumValidity: nil, now: beatNow(writer)) == .unusable("segment retired"))
        #expect(!segmentBytes(writer).contains(Array("retired-secret".utf8)))
    }

    @Test func aStaleHeartbeatMakesTheSegmentUnusable() throws {
        let writer = try writer()
        let reader = try reader(writer)
        writer.put(id: "v-1", token: "t", expiry: now + hour, lifetime: hour, unixExpiry: 1)
        let later = now + 3_500_000_000
        #expect(reader.lookup(id: "v-1", minimumValidity: nil, now: later) == .unusable("agent heartbeat stale"))
        writer.beat(now: later)
        #expect(reader.lookup(id: "v-1", minimumValidity: nil, now: later) == .hit(token: "t", unixExpiry: 1))
    }

    @Test func noDescriptorCanWriteResizeOrMapTheSegmentWritable() throws {
        let writer = try writer()
        #expect(fsm_is_sealed_read_only(fsm_seals(writer.descriptor)) != 0)
        let readOnly = fsm_reopen_read_only(writer.descriptor)
        defer { close(readOnly) }
        // A holder of the read-only descriptor re-opens it read-write through /proc.
        let writable = open("/proc/self/fd/\(readOnly)", O_RDWR)
        #expect(writable >= 0, "a memfd's inode lets it be re-opened read-write")
        defer { close(writable) }
        var byte: UInt8 = 0x41
        errno = 0
        #expect(pwrite(writable, &byte, 1, 300) == -1 && errno == EPERM)
        errno = 0
        #expect(ftruncate(writable, off_t(writer.size * 2)) == -1 && errno == EPERM)
        errno = 0
        #expect(ftruncate(writable, 4096) == -1 && errno == EPERM)
        errno = 0
        let mapping = mmap(nil, writer.size, PROT_READ | PROT_WRITE, MAP_SHARED, writable, 0)
        #expect(mapping == MAP_FAILED && errno == EPERM)
        // The agent's own mapping, made before sealing, still writes.
        #expect(writer.put(id: "still", token: "writes", expiry: now + hour, lifetime: hour, unixExpiry: 1) == .stored)
    }

    @Test func aDamagedOrForeignSegmentIsRefused() throws {
        let writer = try writer()
        let fd = fsm_reopen_read_only(writer.descriptor)
        defer { close(fd) }
        #expect(throws: SegmentError.self) {
            try SegmentReader(descriptor: fd, expectedSize: writer.size + 4096, kind: "vehicle")
        }
        #expect(throws: SegmentError.self) {
            try SegmentReader(descriptor: fd, expectedSize: writer.size, kind: "trip")
        }
        // A memory file that is not a segment.
        let other = fsm_memfd_create("not-a-segment")
        defer { close(other) }
        #expect(ftruncate(other, 8192) == 0)
        #expect(throws: SegmentError.self) { try SegmentReader(descriptor: other, expectedSize: 8192, kind: "vehicle") }
    }

    @Test func sipHashMatchesTheReferenceVectors() {
        // The SipHash paper's key 00 01 .. 0f; messages 00 01 .. (n-1).
        let k0: UInt64 = 0x0706_0504_0302_0100
        let k1: UInt64 = 0x0f0e_0d0c_0b0a_0908
        let expected: [UInt64] = [0x726f_db47_dd0e_0e31, 0x74f8_39c5_93dc_67fd, 0x0d6c_8009_d9a9_4f5a]
        for (length, value) in expected.enumerated() {
            let message = (0..<length).map { UInt8($0) }
            #expect(message.withUnsafeBytes { SipHash24.hash($0, k0: k0, k1: k1) } == value)
        }
        let fifteen = (0..<15).map { UInt8($0) }
        #expect(fifteen.withUnsafeBytes { SipHash24.hash($0, k0: k0, k1: k1) } == 0xa129_ca61_49be_45e5)
    }

    private func segmentBytes(_ writer: SegmentWriter) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: writer.size)
        _ = bytes.withUnsafeMutableBytes { pread(writer.descriptor, $0.baseAddress, writer.size, 0) }
        return bytes
    }
}

extension Array where Element == UInt8 {
    fileprivate func contains(_ needle: [UInt8]) -> Bool {
        guard needle.count <= count else { return false }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if self[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}
