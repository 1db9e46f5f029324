import Testing

@testable import TokenAgent

@Suite("Cache snapshot (the fd-store hand-over)")
struct CacheSnapshotTests {
    @Test func tokensRoundTripInOrder() {
        let tokens = (0..<1000).map {
            CachedToken(
                kind: $0 % 2 == 0 ? "vehicle" : "trip",
                id: "id-\($0)-é",
                token: "tok.\($0).sig",
                expiresAt: 1_800_000_000 + Int64($0)
            )
        }
        #expect(CacheSnapshot.decode(CacheSnapshot.encode(tokens)) == tokens)
        #expect(CacheSnapshot.decode(CacheSnapshot.encode([])) == [])
    }

    @Test func providerDigestsRoundTripAndMalformedOnesAreSkipped() {
        let tokens = [CachedToken(kind: "vehicle", id: "v-1", token: "tok", expiresAt: 1_800_000_000)]
        let providers = ["vehicle": "0123456789abcdef", "trip": "fedcba9876543210"]
        let contents = CacheSnapshot.contents(of: CacheSnapshot.encode(tokens, providers: providers))
        #expect(contents == CacheSnapshot.Contents(providers: providers, tokens: tokens))
        let text =
            "\(CacheSnapshot.header)\n#provider\tvehicle\n#provider\t\tx\n#other\tvehicle\tx\n#provider\ttrip\tab\n"
        #expect(CacheSnapshot.contents(of: Array(text.utf8)).providers == ["trip": "ab"])
    }

    @Test func malformedLinesAreSkippedAndAnUnknownHeaderGivesNothing() {
        let good = "vehicle\tv-1\t1800000000\ttok-1"
        let lines = [
            CacheSnapshot.header, good, "", "vehicle\tv-2\tsoon\ttok-2", "vehicle\tv-3\t1800000000",
            "vehicle\tv-4\t1800000000\ttok\t4", "\tv-5\t1800000000\ttok-5", "trip\tt-1\t1800000001\ttok-t",
        ]
        var bytes = Array(lines.joined(separator: "\n").utf8) + [0x0A]
        bytes += [0xFF, 0x09, 0x61, 0x09, 0x31, 0x09, 0x62, 0x0A]  // not UTF-8
        #expect(
            CacheSnapshot.decode(bytes) == [
                CachedToken(kind: "vehicle", id: "v-1", token: "tok-1", expiresAt: 1_800_000_000),
                CachedToken(kind: "trip", id: "t-1", token: "tok-t", expiresAt: 1_800_000_001),
            ]
        )
        #expect(CacheSnapshot.decode(Array("fleet-tokend-cache v1\n\(good)\n".utf8)) == [], "an older agent's")
        #expect(CacheSnapshot.decode(Array("fleet-tokend-cache v3\n\(good)\n".utf8)) == [])
        #expect(CacheSnapshot.decode(Array(CacheSnapshot.header.utf8)) == [])
        #expect(CacheSnapshot.decode([]) == [])
    }
}
