import Testing
import TokenWire

@testable import TokenAgent

@Suite("Cache snapshot format (the cache file and the fd store)")
struct CacheSnapshotTests {
    static let tokens = (0..<1000).map {
        CachedToken(
            kind: $0 % 2 == 0 ? "vehicle" : "trip",
            id: "id-\($0)-é",
            token: "tok.\($0).sig",
            expiresAt: 1_800_000_000 + Int64($0)
        )
    }
    static let providers = ["vehicle": "0123456789abcdef", "trip": "fedcba9876543210"]

    /// `body` framed with a right header: what a writer that wrote `body` would have written.
    static func framed(_ body: String) -> [UInt8] { CacheSnapshot.frame(Array(body.utf8)).bytes }

    @Test func aSnapshotReadsBackWithItsVersionsProvidersAndTokensInOrder() throws {
        let bytes = CacheSnapshot.encode(Self.tokens, providers: Self.providers)
        let contents = try CacheSnapshot.read(bytes)
        #expect(contents.tokens == Self.tokens)
        #expect(contents.providers == Self.providers)
        #expect(contents.formatVersion == 3)
        #expect(contents.agentVersion == FleetTokendVersion.version)
        #expect(contents.malformedLines == 0)
        #expect(try CacheSnapshot.read(CacheSnapshot.encode([])).tokens == [])
    }

    @Test func theHeaderGivesTheVersionTheLengthAndTheChecksumInFixedPlaces() throws {
        var builder = CacheSnapshot.Builder(providers: Self.providers, agentVersion: "9.8.7")
        builder.append(contentsOf: Array(Self.tokens.prefix(3)))
        let encoded = builder.finish()
        #expect(encoded.header.count == CacheSnapshot.headerBytes)
        #expect(encoded.tokenCount == 3 && encoded.leftOut == 0)
        let lines = String(decoding: encoded.header, as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 3)
        #expect(lines[0] == "fleet-tokend-cache v3")
        #expect(
            lines[1] == "length " + String(repeating: "0", count: 20 - "\(encoded.body.count)".count)
                + "\(encoded.body.count)"
        )
        #expect(lines[2].hasPrefix("sha256 ") && lines[2].count == 7 + 64)
        #expect(
            String(decoding: encoded.body, as: UTF8.self).hasPrefix(
                "#agent\t9.8.7\n#provider\ttrip\tfedcba9876543210\n"
            )
        )
        #expect(try CacheSnapshot.read(encoded.bytes).agentVersion == "9.8.7")
    }

    /// The unframed version 2 of the agents before the cache file is refused, wherever it comes
    /// from (the fd store reads with the same call), and says so.
    @Test func aVersionTwoSnapshotIsRefusedWithItsVersion() throws {
        let text = "fleet-tokend-cache v2\n#provider\tvehicle\tabc\nvehicle\tv-1\t1800000000\ttok-1\n"
        #expect(throws: CacheSnapshot.Refusal.unknownFormat("2")) { try CacheSnapshot.read(Array(text.utf8)) }
        #expect(CacheSnapshot.decode(Array(text.utf8)) == [])
        #expect(
            CacheSnapshot.Refusal.unknownFormat("2").description == "format version 2, which this agent does not read"
        )
    }

    @Test func aSnapshotFailingItsFramingIsRefusedWhole() throws {
        let good = CacheSnapshot.encode(Array(Self.tokens.prefix(10)), providers: Self.providers)
        let headerBytes = CacheSnapshot.headerBytes
        let cases: [(String, [UInt8], CacheSnapshot.Refusal)] = [
            ("empty", [], .notASnapshot),
            ("another file", Array("{\"token\": \"x\"}\n".utf8), .notASnapshot),
            ("no line end", Array(repeating: UInt8(ascii: "a"), count: 100), .notASnapshot),
            (
                "an older agent's", Array("fleet-tokend-cache v1\nvehicle\tv-1\t1800000000\ttok\n".utf8),
                .unknownFormat("1")
            ),
            ("a newer agent's", Array("fleet-tokend-cache v4\n".utf8) + good.dropFirst(22), .unknownFormat("4")),
            ("a hostile version", Array("fleet-tokend-cache v\u{1B}[2J\n".utf8), .unknownFormat("?[2J")),
            ("header cut", Array(good.prefix(50)), .truncated(expected: headerBytes, found: 50)),
            ("body cut", Array(good.dropLast()), .truncated(expected: good.count, found: good.count - 1)),
            ("bytes after", good + [0x0A], .trailingBytes(expected: good.count, found: good.count + 1)),
            ("length not digits", replacing(good, at: 22 + 7 + 3, with: UInt8(ascii: "x")), .badHeader),
            ("checksum upper case", replacing(good, at: headerBytes - 2, with: UInt8(ascii: "G")), .badHeader),
            ("a body byte changed", replacing(good, at: good.count - 3, with: UInt8(ascii: "Z")), .checksumMismatch),
            (
                "a length past the limit",
                Array("fleet-tokend-cache v3\nlength 99999999999999999999\n".utf8) + good.dropFirst(22 + 28),
                .badHeader
            ),
            (
                "a length just past the limit",
                Array("fleet-tokend-cache v3\nlength 00000000000268435456\n".utf8) + good.dropFirst(22 + 28),
                .oversized(headerBytes + 268_435_456)
            ),
        ]
        for (name, bytes, refusal) in cases {
            #expect(throws: refusal, "\(name)") { try CacheSnapshot.read(bytes) }
            #expect(CacheSnapshot.decode(bytes) == [], "\(name)")
        }
    }

    @Test func malformedLinesInAWellFramedBodyAreSkippedAndCounted() throws {
        let lines = [
            "#agent\t1.2.3", "#provider\tvehicle\tab", "#provider\tvehicle", "#provider\t\tx", "#other\tvehicle\tx",
            "vehicle\tv-1\t1800000000\ttok-1", "", "vehicle\tv-2\tsoon\ttok-2", "vehicle\tv-3\t1800000000",
            "vehicle\tv-4\t1800000000\ttok\t4", "\tv-5\t1800000000\ttok-5", "vehicle\tv-6\t+1800000000\ttok-6",
            "vehicle\tv-7\t99999999999999999999\ttok-7", "trip\tt-1\t1800000001\ttok-t",
        ]
        var body = Array(lines.joined(separator: "\n").utf8) + [0x0A]
        body += [0xFF, 0x09, 0x61, 0x09, 0x31, 0x09, 0x62, 0x0A]  // not UTF-8
        let contents = try CacheSnapshot.read(CacheSnapshot.frame(body).bytes)
        #expect(contents.agentVersion == "1.2.3")
        #expect(contents.providers == ["vehicle": "ab"])
        #expect(
            contents.tokens == [
                CachedToken(kind: "vehicle", id: "v-1", token: "tok-1", expiresAt: 1_800_000_000),
                CachedToken(kind: "trip", id: "t-1", token: "tok-t", expiresAt: 1_800_000_001),
            ]
        )
        #expect(contents.malformedLines == 10)
    }

    @Test func aChecksumTakenAsTheBodyGrowsIsTheWholeBodysChecksum() throws {
        var whole = CacheSnapshot.Builder(providers: Self.providers)
        whole.append(contentsOf: Self.tokens)
        var piecewise = CacheSnapshot.Builder(providers: Self.providers)
        piecewise.checksumAppended()
        for start in stride(from: 0, to: Self.tokens.count, by: 32) {
            piecewise.append(contentsOf: Array(Self.tokens[start..<min(start + 32, Self.tokens.count)]))
            piecewise.checksumAppended()
            piecewise.checksumAppended()  // nothing new: no change
        }
        #expect(piecewise.finish().bytes == whole.finish().bytes)
        // Bytes appended after the last call are taken at the finish.
        piecewise.append(CachedToken(kind: "vehicle", id: "late", token: "tok.late.sig", expiresAt: 1_900_000_000))
        whole.append(CachedToken(kind: "vehicle", id: "late", token: "tok.late.sig", expiresAt: 1_900_000_000))
        let read = try CacheSnapshot.read(piecewise.finish().bytes)
        #expect(piecewise.finish().bytes == whole.finish().bytes)
        #expect(read.tokens.count == Self.tokens.count + 1)
    }

    @Test func aBodyDrainedInPiecesFramesAsTheWholeOneAndKeepsItsLimit() throws {
        let limit = CacheSnapshot.headerBytes + 400
        var whole = CacheSnapshot.Builder(providers: Self.providers, limit: limit)
        whole.append(contentsOf: Self.tokens)
        var drained = CacheSnapshot.Builder(providers: Self.providers, limit: limit)
        var pieces: [[UInt8]] = []
        for token in Self.tokens {
            drained.append(token)
            drained.drain { pieces.append(Array($0)) }
            #expect(drained.pendingBytes == 0)
        }
        drained.append(CachedToken(kind: "vehicle", id: "late", token: "tok.late.sig", expiresAt: 1_900_000_000))
        whole.append(CachedToken(kind: "vehicle", id: "late", token: "tok.late.sig", expiresAt: 1_900_000_000))
        let expected = whole.finish()
        let framed = drained.finish()
        // The header frames every piece and what is left; the tokens past the limit are left out
        // as when nothing is drained.
        #expect(framed.header == expected.header)
        #expect(framed.header + pieces.joined() + framed.body == expected.bytes)
        #expect(framed.bodyLength == expected.bodyLength && framed.byteCount == expected.byteCount)
        #expect(framed.byteCount <= limit)
        #expect(framed.tokenCount == expected.tokenCount && framed.leftOut == expected.leftOut)
        #expect(framed.leftOut > 0, "the limit was reached")
        #expect(pieces.filter { !$0.isEmpty }.count > 1)
    }

    @Test func roomForAChunkIsMadeAheadAndTheBytesAppendAsTheStringsDo() throws {
        var builder = CacheSnapshot.Builder(providers: Self.providers)
        builder.makeRoom(forTokens: 32)
        var strings = CacheSnapshot.Builder(providers: Self.providers)
        for token in Self.tokens {
            var text = token.token
            text.withUTF8 {
                builder.append(kind: token.kind, id: token.id, expiresAt: token.expiresAt, token: .init($0))
            }
            strings.append(token)
        }
        // A field the format cannot hold is left out as from a String.
        builder.append(kind: "vehicle", id: "v-1", expiresAt: 1, token: UnsafeRawBufferPointer(start: nil, count: 0))
        Array("a\tb".utf8).withUnsafeBytes { builder.append(kind: "vehicle", id: "v-2", expiresAt: 1, token: $0) }
        #expect(builder.finish().bytes == strings.finish().bytes)
        #expect(builder.finish().leftOut == 2)
    }

    @Test func theBuilderLeavesOutWhatTheFormatCannotHoldAndWhatPassesItsLimit() throws {
        var builder = CacheSnapshot.Builder(providers: ["vehicle": "ab", "bad\tkind": "x"])
        builder.append(CachedToken(kind: "vehicle", id: "v\t1", token: "tok", expiresAt: 1))
        builder.append(CachedToken(kind: "vehicle", id: "v-1", token: "tok\nvehicle\tv-2\t9\tforged", expiresAt: 1))
        builder.append(CachedToken(kind: "#agent", id: "v-1", token: "tok", expiresAt: 1))
        builder.append(CachedToken(kind: "vehicle", id: "", token: "tok", expiresAt: 1))
        builder.append(CachedToken(kind: "vehicle", id: "v-3", token: "tok-3", expiresAt: 1_800_000_000))
        let encoded = builder.finish()
        #expect(encoded.tokenCount == 1 && encoded.leftOut == 4)
        let contents = try CacheSnapshot.read(encoded.bytes)
        #expect(contents.providers == ["vehicle": "ab"])
        #expect(contents.tokens.map(\.id) == ["v-3"])

        let limit = CacheSnapshot.headerBytes + 200
        var small = CacheSnapshot.Builder(providers: [:], limit: limit)
        small.append(contentsOf: Self.tokens)
        let bounded = small.finish()
        #expect(bounded.byteCount <= limit)
        #expect(bounded.tokenCount > 0 && bounded.tokenCount + bounded.leftOut == Self.tokens.count)
        let kept = try CacheSnapshot.read(bounded.bytes).tokens
        #expect(kept.count == bounded.tokenCount && Set(kept).isSubset(of: Set(Self.tokens)))
    }
}

private func replacing(_ bytes: [UInt8], at index: Int, with byte: UInt8) -> [UInt8] {
    var copy = bytes
    copy[index] = byte
    return copy
}
