import CSharedMemory
import Foundation
import Logging
import TestSupport
import Testing
import TokenSegment

@testable import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// Segment memory counted and bounded whatever readers do: a retired generation a reader keeps
/// counts until the kernel frees it, and a reader that keeps every descriptor cannot make the
/// segments take more than the limit, nor use up another kind's room.
@Suite("Shared segments: generations readers keep")
struct MappedGenerationsTests {
    private let expiry = MonotonicInstant(seconds: Double(fsm_boottime_ns()) / 1e9 + 3600)
    private let unixExpiry = UnixTime(seconds: Date().timeIntervalSince1970 + 3600)

    private func makeSegments(kinds: [String], _ adjust: (inout SharedSegments.Limits) -> Void) -> SharedSegments {
        var limits = SharedSegments.Limits()
        adjust(&limits)
        return SharedSegments(kinds: kinds, policy: RefreshPolicy(), limits: limits, logger: Logger(label: "test"))
    }

    /// A descriptor of `kind`'s current segment, as a reader is handed it (the caller closes it).
    private func take(_ segments: SharedSegments, _ kind: String) -> SharedSegments.Offer? {
        guard case .offered(let offer) = segments.offer(kind: kind, unlessAlreadySent: { _ in false }) else {
            return nil
        }
        return offer
    }

    /// A change of `kind`'s rules: its readers must ask again, so it gets a new generation.
    private func changeRules(_ segments: SharedSegments, _ kinds: Set<String>, of kind: String) {
        segments.reconfigure(kinds: kinds, policy: RefreshPolicy(), rulesChanged: [kind])
        segments.offer([kind])
    }

    @Test func aRetiredGenerationCountsWhileAReaderHoldsItAndNotAfter() async throws {
        let segments = makeSegments(kinds: ["vehicle"]) { _ in }
        defer { segments.retireAll() }
        let current = segments.statistics()
        #expect(current.mappedBytes == current.bytes, "only the current segment")
        #expect(current.retiredMapped == 0)

        // Nobody holds the old one: replaced, it is gone, at once or, when a child process another
        // test was starting copied the descriptor table meanwhile, at that child's exec (seen in
        // a full parallel run: the copy outlived the checks below, which then counted it too).
        changeRules(segments, ["vehicle"], of: "vehicle")
        #expect(await kernelFrees(segments), "the replaced generation is freed")
        var statistics = segments.statistics()
        #expect(statistics.retiredMapped == 0)
        #expect(statistics.mappedBytes == statistics.bytes)

        // A reader keeps a descriptor, and another a mapping only: both count until let go.
        let kept = try #require(take(segments, "vehicle"))
        let mapped = try #require(take(segments, "vehicle"))
        let mapping = try #require(mmap(nil, mapped.size, PROT_READ, MAP_SHARED, mapped.descriptor, 0))
        #expect(mapping != MAP_FAILED)
        close(mapped.descriptor)
        changeRules(segments, ["vehicle"], of: "vehicle")
        statistics = segments.statistics()
        #expect(statistics.retiredMapped == 1)
        #expect(statistics.mappedBytes == statistics.bytes + kept.size)

        close(kept.descriptor)
        statistics = segments.statistics()
        #expect(statistics.retiredMapped == 1, "still mapped")
        munmap(mapping, mapped.size)
        #expect(await kernelFrees(segments), "the kernel freed it")
        statistics = segments.statistics()
        #expect(statistics.retiredMapped == 0)
        #expect(statistics.mappedBytes == statistics.bytes)
    }

    /// Whether the kernel frees every retired generation: at once when this process held the last
    /// descriptor or mapping, a moment later when a child process another test of this process was
    /// starting held a copy of its descriptors (a spawn copies the whole descriptor table, and the
    /// copy goes at the child's exec). Each look is a beat, as the agent's heartbeat does.
    private func kernelFrees(_ segments: SharedSegments) async -> Bool {
        await eventually {
            segments.beat()
            return segments.statistics().retiredMapped == 0
        }
    }

    @Test func aReaderKeepingEveryGenerationCannotTakeMoreThanItsShare() async throws {
        // 8 MiB in all, two kinds: a kind's retired generations still held may take 2 MiB before
        // it is refused a new one. Each segment is 1024 slots of 1024 bytes (just over 1 MiB).
        let segments = makeSegments(kinds: ["vehicle", "trip"]) {
            $0.maxTotalBytes = 8 << 20
            $0.maxGenerationsPerMinute = 1000
        }
        defer { segments.retireAll() }
        let kinds: Set<String> = ["vehicle", "trip"]
        var kept: [Int32] = []
        defer { for descriptor in kept { close(descriptor) } }
        for _ in 0..<10 {
            if let offer = take(segments, "vehicle") { kept.append(offer.descriptor) }
            changeRules(segments, kinds, of: "vehicle")
        }
        let statistics = segments.statistics()
        #expect(statistics.mappedBytes <= 8 << 20, "never more than the limit: \(statistics.mappedBytes)")
        // The share (2 MiB, under two segments), then the generation made just under it, and the
        // one retired when the kind was refused a new one.
        #expect(statistics.retiredMapped == 3, "the share and two segments: \(statistics.retiredMapped)")
        #expect(kept.count < 10, "the kind went without a segment once its share was used up")

        // The other kind still gets its new generations (rules changed, twice).
        for _ in 0..<2 {
            let before = segments.statistics().generations
            changeRules(segments, kinds, of: "trip")
            #expect(segments.statistics().generations == before + 1, "trip is not held up by vehicle's reader")
            #expect(take(segments, "trip").map { close($0.descriptor) } != nil)
        }

        // Once the reader lets go, the held-up kind gets a segment at the next beat after the
        // kernel frees its generations.
        for descriptor in kept { close(descriptor) }
        kept = []
        #expect(await kernelFrees(segments))
        let after = segments.statistics()
        #expect(after.retiredMapped == 0)
        #expect(after.segments == 2)
        #expect(take(segments, "vehicle").map { close($0.descriptor) } != nil)
    }
}
