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

    @Test func sipHash24MatchesTheReferenceVectors() {
        // The SipHash paper's key 00 01 .. 0f; messages 00 01 .. (n-1) for n from 0 to 63: every
        // length of the last partial word, over none to seven whole words.
        let k0: UInt64 = 0x0706_0504_0302_0100
        let k1: UInt64 = 0x0f0e_0d0c_0b0a_0908
        let expected: [UInt64] = [
            0x726f_db47_dd0e_0e31, 0x74f8_39c5_93dc_67fd, 0x0d6c_8009_d9a9_4f5a,
            0x8567_6696_d7fb_7e2d, 0xcf27_94e0_2771_87b7, 0x1876_5564_cd99_a68d,
            0xcbc9_466e_58fe_e3ce, 0xab02_00f5_8b01_d137, 0x93f5_f579_9a93_2462,
            0x9e00_82df_0ba9_e4b0, 0x7a5d_bbc5_94dd_b9f3, 0xf4b3_2f46_226b_ada7,
            0x751e_8fbc_860e_e5fb, 0x14ea_5627_c084_3d90, 0xf723_ca90_8e7a_f2ee,
            0xa129_ca61_49be_45e5, 0x3f2a_cc7f_57c2_9bdb, 0x699a_e9f5_2cbe_4794,
            0x4bc1_b3f0_968d_d39c, 0xbb6d_c91d_a779_61bd, 0xbed6_5cf2_1aa2_ee98,
            0xd0f2_cbb0_2e3b_67c7, 0x9353_6795_e3a3_3e88, 0xa80c_038c_cd5c_cec8,
            0xb8ad_50c6_f649_af94, 0xbce1_92de_8a85_b8ea, 0x17d8_35b8_5bbb_15f3,
            0x2f2e_6163_076b_cfad, 0xde4d_aaac_a71d_c9a5, 0xa6a2_5066_8795_6571,
            0xad87_a353_5c49_ef28, 0x32d8_92fa_d841_c342, 0x7127_512f_72f2_7cce,
            0xa7f3_2346_f959_78e3, 0x12e0_b01a_bb05_1238, 0x15e0_34d4_0fa1_97ae,
            0x314d_ffbe_0815_a3b4, 0x0279_90f0_2962_3981, 0xcadc_d4e5_9ef4_0c4d,
            0x9abf_d876_6a33_735c, 0x0e3e_a96b_5304_a7d0, 0xad0c_42d6_fc58_5992,
            0x1873_06c8_9bc2_15a9, 0xd4a6_0abc_f379_2b95, 0xf935_451d_e4f2_1df2,
            0xa953_8f04_1975_5787, 0xdb9a_cddf_f56c_a510, 0xd06c_98cd_5c09_75eb,
            0xe612_a3cb_9ecb_a951, 0xc766_e62c_fcad_af96, 0xee64_435a_9752_fe72,
            0xa192_d576_b245_165a, 0x0a87_87bf_8ecb_74b2, 0x81b3_e73d_20b4_9b6f,
            0x7fa8_220b_a3b2_ecea, 0x2457_31c1_3ca4_2499, 0xb78d_bfaf_3a8d_83bd,
            0xea1a_d565_322a_1a0b, 0x60e6_1c23_a379_5013, 0x6606_d7e4_4628_2b93,
            0x6ca4_ecb1_5c5f_91e1, 0x9f62_6da1_5c96_25f3, 0xe51b_3860_8ef2_5f57,
            0x958a_324c_eb06_4572,
        ]
        #expect(expected.count == 64)
        for (length, value) in expected.enumerated() {
            let message = (0..<length).map { UInt8($0) }
            #expect(message.withUnsafeBytes { SipHash24.hash($0, k0: k0, k1: k1) } == value, "length \(length)")
        }
    }

    @Test func sipHash13MatchesPublishedVectors() {
        // SipHash-1-3 under the zero key, as published beside other implementations of it: the
        // empty message, seven bytes (a last word of four, two and one) and fifteen (a whole
        // word and seven).
        let vectors: [(String, UInt64)] = [
            ("", 0xd1fb_a762_150c_532c),
            ("siphash", 0x8264_ceec_cb16_bcbe),
            ("digest-sip_hash", 0xce31_007e_3413_0c0a),
        ]
        for (message, value) in vectors {
            #expect(Array(message.utf8).withUnsafeBytes { SipHash13.hash($0, k0: 0, k1: 0) } == value, "\(message)")
        }
        // Not SipHash-2-4 by another name.
        #expect(Array("siphash".utf8).withUnsafeBytes { SipHash24.hash($0, k0: 0, k1: 0) } != 0x8264_ceec_cb16_bcbe)
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
