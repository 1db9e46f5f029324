import Testing
import TokenWire

@testable import TokenAgent

/// Issue 46, item 8: a snapshot of millions of tiny lines (the review's: 200 MiB, 26 million lines,
/// a valid checksum) cost a token each in memory and took tens of seconds to start. Now no more
/// token lines are decoded than the agent's cache can hold (`max_entries`); the rest are counted
/// and skipped unread. scripts/measure-cache-adoption measures the review's file against the agent.
@Suite("Cache snapshot: lines past max_entries")
struct CacheSnapshotLimitTests {
    /// A framed body of `good` token lines, then `past` lines that a decoder would count as
    /// malformed (no tabs), then a provider line: what a reader that decodes past the limit would
    /// count, it must not.
    static func body(good: Int, past: Int) -> [UInt8] {
        var body = Array("#agent\t9.9.9\n".utf8)
        let line = Array("v\ti\t1800000000\tt\n".utf8)
        let junk = Array("xxxxxxx\n".utf8)
        body.reserveCapacity(body.count + good * line.count + past * junk.count + 64)
        for _ in 0..<good { body.append(contentsOf: line) }
        for _ in 0..<past { body.append(contentsOf: junk) }
        body.append(contentsOf: Array("#provider\tv\tdigest\n".utf8))
        return CacheSnapshot.frame(body).bytes
    }

    @Test func linesPastTheLimitAreCountedNeverDecodedNorHeld() throws {
        let bytes = Self.body(good: 1500, past: 300_000)
        let limited = try CacheSnapshot.read(bytes, maxTokens: 1000)
        #expect(limited.tokens.count == 1000, "no more held than the limit")
        #expect(limited.malformedLines == 0, "none of the lines past the limit was decoded")
        #expect(limited.linesPastLimit == 500 + 300_000)
        #expect(limited.providers == ["v": "digest"], "a # line after them is still read")
        #expect(limited.agentVersion == "9.9.9")

        // Without a limit every line is decoded, as before.
        let whole = try CacheSnapshot.read(bytes)
        #expect(whole.tokens.count == 1500 && whole.malformedLines == 300_000 && whole.linesPastLimit == 0)

        // Malformed lines count against the limit too: the work is bounded, not only what is kept.
        let junkFirst = try CacheSnapshot.read(CacheSnapshot.frame(Array("a\nb\nc\tx\n".utf8)).bytes, maxTokens: 2)
        #expect(junkFirst.malformedLines == 2 && junkFirst.linesPastLimit == 1 && junkFirst.tokens.isEmpty)
    }

    @Test func adoptionCountsTheLinesPastTheLimitAsRefused() throws {
        let contents = try CacheSnapshot.read(Self.body(good: 10, past: 5), maxTokens: 4)
        let rules = SnapshotAdoption(digests: [:], acceptance: TokenAcceptance())
        let (taken, counts) = rules.filter(contents, now: 1_700_000_000)
        #expect(taken.isEmpty)
        #expect(counts.changedProvider == 4)
        #expect(counts.refused == 6 + 5)
        #expect(counts.total == 15)
    }
}
