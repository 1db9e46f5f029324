import CSharedMemory
import Foundation
import Testing
import TokenSegment

@testable import FleetTokenClient

#if canImport(Glibc)
    import Glibc
#endif

/// The client's cache of tokens read from shared memory: its hash, and its places over a real
/// segment that a writer changes underneath.
@Suite("FleetTokenClient read cache")
struct ClientReadCacheTests {
    private let hour: UInt64 = 3_600_000_000_000
    private let places = 16 * ReadCacheShard.capacity

    private func place(_ subject: TokenSubject) -> Int { Int(CacheHash.of(subject) & UInt64(places - 1)) }

    @Test func everyByteOfTheIdAndTheKindsLengthChangeTheHash() {
        for length in 1...40 {
            let id = String(repeating: "a", count: length)
            let base = CacheHash.of(.vehicle(id))
            for position in 0..<length {
                var bytes = Array(id.utf8)
                bytes[position] = UInt8(ascii: "b")
                let changed = CacheHash.of(.vehicle(String(decoding: bytes, as: UTF8.self)))
                #expect(changed != base, "length \(length), byte \(position)")
            }
            #expect(CacheHash.of(.trip(id)) != base)
            #expect(CacheHash.of(.vehicle(id + "a")) != base)
        }
        #expect(CacheHash.of(.vehicle("")) != CacheHash.of(.trip("")))
    }

    @Test func idsThatDifferOnlyLateSpreadOverThePlaces() {
        // The benchmark's ids differ only in their last two bytes: they must not share places.
        let spread = Set((0..<64).map { place(.vehicle("bench-spread-\($0)")) })
        #expect(spread.count >= 62, "\(spread.count) places for 64 ids")
        // 10,000 ids over 16,384 places: about 7,500 distinct places if the hash spreads well.
        let many = Set((0..<10_000).map { place(.vehicle("v-\($0)")) })
        #expect(many.count > 7_000, "\(many.count) places for 10,000 ids")
    }

    private func segment() throws -> (SegmentWriter, SegmentReader) {
        let policy = SegmentPolicy(minValidity: 300, servingFloor: 10, idleTimeout: 600)
        let writer = try SegmentWriter(kind: "vehicle", generation: 1, slotCount: 64, slotSize: 1024, policy: policy)
        writer.beat(now: fsm_boottime_ns())
        let fd = fsm_reopen_read_only(writer.descriptor)
        #expect(fd >= 0)
        defer { close(fd) }
        return (writer, try SegmentReader(descriptor: fd, expectedSize: writer.size, kind: "vehicle"))
    }

    /// Copies `id` out of the segment into `shard`'s place `index`, as the client's slow path does.
    private func cache(_ id: String, _ reader: SegmentReader, in shard: ReadCacheShard, at index: Int) throws {
        guard case .found(let copy) = reader.copy(id: id) else { throw CacheTestError() }
        let token = Token(jwt: copy.token, expiresAt: Date(timeIntervalSince1970: TimeInterval(copy.unixExpiry)))
        shard.store(.vehicle(id), at: index, reader: reader, copy: copy, token: token, reportInterval: 0) { true }
    }

    private struct CacheTestError: Error {}

    private func probe(_ shard: ReadCacheShard, _ id: String, at index: Int, interval: Int = 0) -> String {
        switch shard.probe(
            .vehicle(id),
            at: index,
            minimumValidity: nil,
            now: fsm_boottime_ns(),
            reportInterval: interval
        ) {
        case .hit(let token): "hit \(token.jwt)"
        case .notServable: "not servable"
        case .unknown: "unknown"
        }
    }

    @Test func aPlaceAnswersUntilItsSlotChanges() throws {
        let (writer, reader) = try segment()
        let now = fsm_boottime_ns()
        writer.put(id: "v-1", token: "first", expiry: now + hour, lifetime: hour, unixExpiry: 1_900_000_000)
        let shard = ReadCacheShard()
        #expect(probe(shard, "v-1", at: 5) == "unknown", "nothing cached yet")
        try cache("v-1", reader, in: shard, at: 5)
        #expect(probe(shard, "v-1", at: 5) == "hit first")
        #expect(probe(shard, "v-2", at: 5) == "unknown", "another id on the same place is not this token")
        #expect(shard.answers == 1)
        // The agent replaces the token: the place no longer answers, and the new one is cached anew.
        writer.put(id: "v-1", token: "second", expiry: now + hour, lifetime: hour, unixExpiry: 1_900_000_001)
        #expect(probe(shard, "v-1", at: 5) == "unknown")
        try cache("v-1", reader, in: shard, at: 5)
        #expect(probe(shard, "v-1", at: 5) == "hit second")
        // Dropped: the place no longer answers.
        writer.remove(id: "v-1")
        #expect(probe(shard, "v-1", at: 5) == "unknown")
    }

    @Test func aTokenWithoutEnoughValidityIsNotServedAndARetiredSegmentIsNotRead() throws {
        let (writer, reader) = try segment()
        let now = fsm_boottime_ns()
        // 60 s left of an hour: under the agent's 300 s minimum validity.
        writer.put(id: "v-short", token: "short", expiry: now + 60_000_000_000, lifetime: hour, unixExpiry: 1)
        writer.put(id: "v-long", token: "long", expiry: now + hour, lifetime: hour, unixExpiry: 2)
        let shard = ReadCacheShard()
        try cache("v-short", reader, in: shard, at: 1)
        try cache("v-long", reader, in: shard, at: 2)
        #expect(probe(shard, "v-short", at: 1) == "not servable")
        #expect(probe(shard, "v-long", at: 2) == "hit long")
        writer.retire()
        #expect(probe(shard, "v-long", at: 2) == "unknown", "a retired segment sends the caller to the agent")
    }

    @Test func aCopyFromAMappingDroppedMeanwhileIsNotKept() throws {
        let shard = ReadCacheShard()
        weak var released: SegmentReader?
        do {
            let (writer, reader) = try segment()
            released = reader
            writer.put(id: "v-1", token: "token", expiry: fsm_boottime_ns() + hour, lifetime: hour, unixExpiry: 1)
            guard case .found(let copy) = reader.copy(id: "v-1") else { throw CacheTestError() }
            let token = Token(jwt: copy.token, expiresAt: Date(timeIntervalSince1970: 1))
            shard.store(.vehicle("v-1"), at: 3, reader: reader, copy: copy, token: token, reportInterval: 0) { false }
            #expect(probe(shard, "v-1", at: 3) == "unknown", "not kept")
            #expect(shard.takeTouched() == ["vehicle": ["v-1"]], "the read is still reported")
        }
        #expect(released == nil, "the cache holds no reference to the dropped mapping")
    }

    @Test func forgettingAMappingEmptiesItsPlacesAndTouchesAreRecordedOncePerInterval() throws {
        let (writer, reader) = try segment()
        let now = fsm_boottime_ns()
        for id in ["v-1", "v-2"] {
            writer.put(id: id, token: "token-\(id)", expiry: now + hour, lifetime: hour, unixExpiry: 1)
        }
        let shard = ReadCacheShard()
        try cache("v-1", reader, in: shard, at: 1)
        try cache("v-2", reader, in: shard, at: 2)
        #expect(shard.takeTouched() == ["vehicle": ["v-1", "v-2"]], "a copy is recorded for TOUCH")
        #expect(probe(shard, "v-1", at: 1, interval: 0) == "hit token-v-1")
        #expect(shard.takeTouched().isEmpty, "already recorded in this interval")
        #expect(probe(shard, "v-1", at: 1, interval: 1) == "hit token-v-1")
        #expect(shard.takeTouched() == ["vehicle": ["v-1"]], "recorded again in the next interval")
        shard.forget(reader)
        #expect(probe(shard, "v-1", at: 1) == "unknown")
        #expect(probe(shard, "v-2", at: 2) == "unknown")
    }
}
