import CSharedMemory
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
import TokenAgentServer
import TokenSegment

@testable import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// The segments as the agent's only copy of the tokens they took: every token handed in comes
/// back, through growth, rotation and a limit that leaves a kind without a segment for a while.
@Suite("Shared segments: the agent's one copy")
struct SharedSegmentsTests {
    private let expiry = MonotonicInstant(seconds: Double(fsm_boottime_ns()) / 1e9 + 3600)
    private let unixExpiry = UnixTime(seconds: Date().timeIntervalSince1970 + 3600)

    private func store(_ segments: SharedSegments, _ id: String, _ token: String) -> Bool {
        segments.tokenStored(
            kind: "vehicle",
            id: id,
            token: token,
            expiry: expiry,
            lifetime: 3600,
            unixExpiry: unixExpiry
        )
    }

    /// Each id's hint from its last read, kept as the store keeps it in the entry.
    private let hints = HintBook()

    /// What the agent reads back for `id`: read twice, without a hint and with the one its last
    /// read left (through growth, rotation, removals and limits alike), which must agree.
    private func read(_ segments: SharedSegments, _ id: String) -> String? {
        var text: String?
        var hinted: String?
        var hint = hints.withLock { $0[id] ?? 0 }
        Array(id.utf8).withUnsafeBytes { bytes in
            _ = segments.withToken(kind: "vehicle", id: bytes) { text = String(decoding: $0, as: UTF8.self) }
            _ = segments.withToken(kind: "vehicle", id: bytes, hint: &hint) {
                hinted = String(decoding: $0, as: UTF8.self)
            }
        }
        hints.withLock { $0[id] = hint }
        #expect(hinted == text, "\(id): the read with its hint agrees")
        return text
    }

    /// Stores a 300-byte token for `v-<index>`, each index of `range`, and records it in `tokens`.
    private func store(_ segments: SharedSegments, _ range: Range<Int>, into tokens: inout [String: String]) {
        for index in range {
            let id = "v-\(index)"
            tokens[id] = token(id, length: 300)
            #expect(store(segments, id, tokens[id]!), "\(id) taken")
        }
    }

    /// A token of `length` bytes naming `id`.
    private func token(_ id: String, length: Int) -> String {
        let head = "tok-\(id)-"
        return head + String(repeating: "x", count: max(0, length - head.utf8.count))
    }

    /// What a reader mapping `segments`' current vehicle segment reads for `id`.
    private func readerSees(_ segments: SharedSegments, _ id: String) throws -> String? {
        guard case .offered(let offer) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            return nil
        }
        defer { close(offer.descriptor) }
        let reader = try SegmentReader(descriptor: offer.descriptor, expectedSize: offer.size, kind: "vehicle")
        if case .found(let copy) = reader.copy(id: id) { return copy.token }
        return nil
    }

    /// Vehicle segments under the default limits as `adjust` changes them.
    private func makeSegments(
        limitClock: SteppedBootClock? = nil,
        _ adjust: (inout SharedSegments.Limits) -> Void
    ) -> SharedSegments {
        var limits = SharedSegments.Limits()
        adjust(&limits)
        guard let limitClock else {
            return SharedSegments(
                kinds: ["vehicle"],
                policy: RefreshPolicy(),
                limits: limits,
                logger: Logger(label: "test")
            )
        }
        return SharedSegments(
            kinds: ["vehicle"],
            policy: RefreshPolicy(),
            limits: limits,
            logger: Logger(label: "test"),
            limitClock: { limitClock.now }
        )
    }

    @Test func aRotationBuiltBesideTheSegmentKeepsEveryChangeMadeDuringIt() throws {
        // Under three quarters full, so no growth starts beside it; every segment is due for
        // rotation at once, so the next heartbeat starts one.
        let segments = makeSegments {
            $0.initialSlots = 512
            $0.rotationInterval = 0
        }
        defer { segments.retireAll() }
        var tokens: [String: String] = [:]
        store(segments, 0..<200, into: &tokens)
        guard case .offered(let old) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            Issue.record("no segment")
            return
        }
        defer { close(old.descriptor) }
        let oldReader = try SegmentReader(descriptor: old.descriptor, expectedSize: old.size, kind: "vehicle")
        segments.startBeat()
        #expect(segments.statistics().generations == 2, "the heartbeat started the rotation's build")
        #expect(segments.advanceBuilding(batch: 20), "slots left after the first batch")
        // While it is built: readers and the agent still read the current generation, and every
        // change reaches both, on either side of the copy's progress (slots are used in order).
        #expect(read(segments, "v-150") == tokens["v-150"])
        segments.tokenRemoved(kind: "vehicle", id: "v-5")  // copied already
        segments.tokenRemoved(kind: "vehicle", id: "v-150")  // not copied yet
        tokens["v-5"] = nil
        tokens["v-150"] = nil
        tokens["v-7"] = token("v-7-renewed", length: 300)
        tokens["v-160"] = token("v-160-renewed", length: 300)
        tokens["v-900"] = token("v-900", length: 300)
        for id in ["v-7", "v-160", "v-900"] { #expect(store(segments, id, tokens[id]!)) }
        #expect(segments.statistics().generations == 2, "the generation being built is made, not yet in force")
        var batches = 1
        while segments.advanceBuilding(batch: 20) { batches += 1 }
        #expect(batches >= 9)
        // The new generation is in force with exactly the tokens held now; the old one is retired.
        guard case .offered(let new) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            Issue.record("no segment after the rotation")
            return
        }
        close(new.descriptor)
        #expect(new.generation > old.generation)
        #expect(oldReader.isRetired)
        #expect(segments.statistics().slotsUsed == tokens.count)
        for index in 0..<1000 {
            let id = "v-\(index)"
            #expect(read(segments, id) == tokens[id], "\(id)")
        }
        #expect(try readerSees(segments, "v-150") == nil, "a token removed during the copy does not come back")
        #expect(try readerSees(segments, "v-160") == tokens["v-160"])
    }

    /// The generation `segments` offers for vehicles now, if any.
    private func offeredGeneration(_ segments: SharedSegments) -> UInt64? {
        guard case .offered(let offer) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            return nil
        }
        close(offer.descriptor)
        return offer.generation
    }

    @Test func aSegmentThreeQuartersFullGrowsBesideItself() throws {
        let segments = makeSegments { $0.initialSlots = 64 }
        defer { segments.retireAll() }
        var tokens: [String: String] = [:]
        func add(_ range: Range<Int>) { store(segments, range, into: &tokens) }
        add(0..<47)
        let first = try #require(offeredGeneration(segments))
        #expect(segments.statistics().generations == 1)
        add(47..<48)
        // 48 of 64: a generation of twice the slots is made, not yet in force.
        #expect(segments.statistics().generations == 2)
        #expect(offeredGeneration(segments) == first)
        guard case .offered(let old) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            Issue.record("no segment")
            return
        }
        defer { close(old.descriptor) }
        let oldReader = try SegmentReader(descriptor: old.descriptor, expectedSize: old.size, kind: "vehicle")
        #expect(segments.advanceBuilding(batch: 20))
        add(48..<52)  // while it is built: to both
        while segments.advanceBuilding(batch: 20) {}
        let second = try #require(offeredGeneration(segments))
        #expect(second > first)
        #expect(oldReader.isRetired)
        let statistics = segments.statistics()
        // Twice the slots, each sized for the longest token so far with 64 bytes to spare.
        let slotSize = SegmentLayout.slotSize(dataBytes: SegmentLayout.padded(4) + SegmentLayout.padded(300) + 64)
        #expect(statistics.bytes == SegmentWriter.size(slotCount: 128, slotSize: slotSize))
        #expect(statistics.slotsUsed == 52)
        for (id, text) in tokens { #expect(try readerSees(segments, id) == text, "\(id)") }
        // The next growth starts at 96 of 128.
        add(52..<95)
        #expect(segments.statistics().generations == 2)
        add(95..<96)
        #expect(segments.statistics().generations == 3)
    }

    @Test func theHeartbeatTakesUpAGrowthAStoreStartedBeforeItsNextBeat() async throws {
        let segments = makeSegments { $0.initialSlots = 64 }
        defer { segments.retireAll() }
        // One beat at its start, the next an hour later: only the store's wake-up can start the copy.
        let heartbeat = Task { try await SegmentHeartbeat(segments: segments, interval: .seconds(3600)).run() }
        defer { heartbeat.cancel() }
        for index in 0..<10 { #expect(store(segments, "v-\(index)", "tok-v-\(index)")) }
        let first = try #require(offeredGeneration(segments))
        for index in 10..<48 { #expect(store(segments, "v-\(index)", "tok-v-\(index)")) }
        // The copy runs once the heartbeat's task is scheduled on Swift concurrency's pool, which
        // a loaded parallel run may keep busy for a long while: the deadline only catches a hang.
        let deadline = ContinuousClock.now + .seconds(120)
        while offeredGeneration(segments) == first, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(offeredGeneration(segments) != first, "grown beside, switched to")
        #expect(segments.statistics().generations == 2)
        for index in 0..<48 { #expect(try readerSees(segments, "v-\(index)") == "tok-v-\(index)") }
    }

    @Test func aGrowthALimitRefusedStartsOnceTheLimitAllows() throws {
        // One generation a minute: a change of rules takes it, so the growth at three quarters is
        // refused, and tried again (a second later at the soonest) once the window has passed.
        let clock = SteppedBootClock()
        let segments = makeSegments(limitClock: clock) {
            $0.initialSlots = 64
            $0.maxGenerationsPerMinute = 1
        }
        defer { segments.retireAll() }
        for index in 0..<10 { #expect(store(segments, "v-\(index)", "tok-v-\(index)")) }
        segments.reconfigure(kinds: ["vehicle"], policy: RefreshPolicy(), rulesChanged: ["vehicle"])
        segments.offer(["vehicle"])
        #expect(segments.statistics().generations == 2)
        for index in 10..<48 { #expect(store(segments, "v-\(index)", "tok-v-\(index)")) }
        #expect(segments.statistics().generations == 2, "refused: the window's one generation is used")
        // Under 64, so the one-step growth of a full segment is never what makes it.
        clock.advance(seconds: 59)
        #expect(store(segments, "v-48", "tok-v-48"))
        #expect(segments.statistics().generations == 2, "still within the minute")
        clock.advance(seconds: 2)
        #expect(store(segments, "v-49", "tok-v-49"))
        #expect(segments.statistics().generations == 3, "the growth started once the window allowed")
        while segments.advanceBuilding(batch: 64) {}
        for stored in 0..<50 { #expect(try readerSees(segments, "v-\(stored)") == "tok-v-\(stored)") }
    }

    @Test func aSegmentThatFillsBeforeItsGrowthIsBuiltFinishesTheBuild() throws {
        let segments = makeSegments { $0.initialSlots = 64 }
        defer { segments.retireAll() }
        var tokens: [String: String] = [:]
        // One batch copied of the build started at 48, then no more: the store that finds no
        // room copies the rest and switches.
        store(segments, 0..<51, into: &tokens)
        #expect(segments.advanceBuilding(batch: 10))
        store(segments, 51..<65, into: &tokens)
        let statistics = segments.statistics()
        #expect(statistics.generations == 2, "the build finished, no growth made under the lock besides")
        #expect(statistics.slotsUsed == 65)
        for (id, text) in tokens {
            #expect(read(segments, id) == text, "\(id)")
            #expect(try readerSees(segments, id) == text, "\(id)")
        }
        while segments.advanceBuilding(batch: 20) {}  // the old generation's wipe
    }

    @Test func oneKindsLockDoesNotHoldUpAnotherKind() async throws {
        let segments = SharedSegments(
            kinds: ["vehicle", "trip"],
            policy: RefreshPolicy(),
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        #expect(store(segments, "v-1", "tok-v-1"))
        let expiry = expiry
        let unixExpiry = unixExpiry
        let outcome = try await offPool { () -> (trip: Bool, vehicleWaited: Bool, vehicleRead: Bool) in
            let tripDone = DispatchSemaphore(value: 0)
            let vehicleDone = DispatchSemaphore(value: 0)
            let tripStored = Mutex(false)
            var trip = false
            var vehicleWaited = false
            // Hold the vehicle kind's lock as a growth or a copy of its segment does, through the
            // real path that takes it: a read of a vehicle token runs its body under that lock.
            let holding = Array("v-1".utf8).withUnsafeBytes {
                segments.withToken(kind: "vehicle", id: $0) { _ in
                    Thread.detachNewThread {
                        let stored = segments.tokenStored(
                            kind: "trip",
                            id: "t-1",
                            token: "tok-t-1",
                            expiry: expiry,
                            lifetime: 3600,
                            unixExpiry: unixExpiry
                        )
                        let read = Array("t-1".utf8).withUnsafeBytes {
                            segments.withToken(kind: "trip", id: $0) { _ in }
                        }
                        tripStored.withLock { $0 = stored && read }
                        tripDone.signal()
                    }
                    Thread.detachNewThread {
                        _ = Array("v-1".utf8).withUnsafeBytes { segments.withToken(kind: "vehicle", id: $0) { _ in } }
                        vehicleDone.signal()
                    }
                    trip = tripDone.wait(timeout: .now() + 30) == .success && tripStored.withLock { $0 }
                    // The same kind's read waits for the lock (the check can fail: it must not pass).
                    vehicleWaited = vehicleDone.wait(timeout: .now() + 0.2) == .timedOut
                }
            }
            #expect(holding, "the vehicle token was read, its lock held meanwhile")
            let vehicleRead = vehicleDone.wait(timeout: .now() + 30) == .success
            return (trip, vehicleWaited, vehicleRead)
        }
        #expect(outcome.trip, "a trip store and read while the vehicle lock is held")
        #expect(outcome.vehicleWaited)
        #expect(outcome.vehicleRead, "the vehicle read once the lock is free")
    }

    /// Kinds are found without a lock among the first sixteen configured (``KindDirectory``) and
    /// in the locked table past them: a kind past the sixteenth, added at start or by a reload,
    /// stores and reads its tokens as the first does; a kind never configured is not found.
    @Test func everyKindIsFoundPastTheSixteenFoundWithoutALock() throws {
        var limits = SharedSegments.Limits()
        limits.initialSlots = 64
        let first = (0..<10).map { "kind\($0)" }
        let later = (10..<24).map { "kind\($0)" }
        let segments = SharedSegments(
            kinds: first,
            policy: RefreshPolicy(),
            limits: limits,
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        segments.reconfigure(kinds: Set(first + later), policy: RefreshPolicy(), rulesChanged: Set(later))
        for kind in first + later + ["never"] {
            let stored = segments.tokenStored(
                kind: kind,
                id: "id-1",
                token: "tok-\(kind)",
                expiry: expiry,
                lifetime: 3600,
                unixExpiry: unixExpiry
            )
            var read: String?
            let found = Array("id-1".utf8).withUnsafeBytes {
                segments.withToken(kind: kind, id: $0) { read = String(decoding: $0, as: UTF8.self) }
            }
            if kind == "never" {
                #expect(!stored && !found && read == nil, "a kind never configured has no segment")
            } else {
                #expect(stored, "\(kind) takes its token")
                #expect(found && read == "tok-\(kind)", "\(kind) gives its token back")
            }
        }
        // A kind a reload removed keeps its entry, and takes no token any more.
        segments.reconfigure(kinds: Set(first), policy: RefreshPolicy(), rulesChanged: [])
        let storedAfter = segments.tokenStored(
            kind: "kind20",
            id: "id-2",
            token: "tok-2",
            expiry: expiry,
            lifetime: 3600,
            unixExpiry: unixExpiry
        )
        #expect(!storedAfter, "a removed kind past the sixteenth takes nothing")
    }

    @Test func everyTokenTakenComesBackThroughGrowth() throws {
        let segments = makeSegments { $0.initialSlots = 64 }
        defer { segments.retireAll() }
        var tokens: [String: String] = [:]
        for index in 0..<600 {
            let id = "v-\(index)"
            // Longer tokens as it goes: the slots grow as well as the table.
            let text = token(id, length: 200 + index * 3)
            tokens[id] = text
            #expect(store(segments, id, text), "\(id) taken")
        }
        #expect(segments.statistics().generations > 3, "grew several times")
        for (id, text) in tokens {
            #expect(read(segments, id) == text, "\(id)")
        }
        #expect(try readerSees(segments, "v-599") == tokens["v-599"], "the same bytes readers map")
        #expect(read(segments, "v-600") == nil)
        segments.tokenRemoved(kind: "vehicle", id: "v-7")
        #expect(read(segments, "v-7") == nil)
        // Replaced: the new token, not the old.
        #expect(store(segments, "v-8", "tok-v-8-again"))
        #expect(read(segments, "v-8") == "tok-v-8-again")
    }

    @Test func aHintNeverOutlivesItsTokenOrItsSegment() throws {
        let segments = makeSegments {
            $0.initialSlots = 512
            $0.rotationInterval = 0
        }
        var tokens: [String: String] = [:]
        store(segments, 0..<40, into: &tokens)
        for index in 0..<40 { #expect(read(segments, "v-\(index)") == tokens["v-\(index)"]) }
        // A rotation (the heartbeat's, every segment being due): every hint points into the old
        // mapping, and each read mends its own.
        segments.startBeat()
        #expect(segments.statistics().generations == 2, "the heartbeat started the rotation's build")
        while segments.advanceBuilding(batch: 16) {}
        for index in 0..<40 { #expect(read(segments, "v-\(index)") == tokens["v-\(index)"]) }
        // A removed token's slot is reused by a new id: the old id's hint finds nothing.
        segments.tokenRemoved(kind: "vehicle", id: "v-3")
        #expect(read(segments, "v-3") == nil)
        #expect(store(segments, "v-new", "tok-v-new"))
        #expect(read(segments, "v-3") == nil)
        #expect(read(segments, "v-new") == "tok-v-new")
        // Every segment retired: no hint reads anything.
        segments.retireAll()
        for index in 0..<40 { #expect(read(segments, "v-\(index)") == nil) }
    }

    @Test func aTokenNoSlotCanHoldIsLeftToTheStore() {
        let segments = SharedSegments(kinds: ["vehicle"], policy: RefreshPolicy(), logger: Logger(label: "test"))
        defer { segments.retireAll() }
        #expect(store(segments, "v-1", "tok-v-1"))
        #expect(!store(segments, "v-1", token("v-1", length: SegmentLayout.maxSlotSize)), "too large for any slot")
        #expect(read(segments, "v-1") == nil, "the older token is not kept either")
        #expect(
            !segments.tokenStored(
                kind: "trip",
                id: "t-1",
                token: "tok-t-1",
                expiry: expiry,
                lifetime: 3600,
                unixExpiry: unixExpiry
            ),
            "no segment for the kind"
        )
    }

    @Test func aKindALimitLeftWithoutASegmentKeepsItsTokensUntilOneTakesThemAgain() async throws {
        // One generation a minute, on a clock the test steps.
        let clock = SteppedBootClock()
        let segments = makeSegments(limitClock: clock) { $0.maxGenerationsPerMinute = 1 }
        defer { segments.retireAll() }
        for index in 0..<20 { #expect(store(segments, "v-\(index)", "tok-v-\(index)")) }
        // A change of rules makes a new generation (the one the window allows), then another
        // change finds the limit reached: the kind goes without a segment.
        segments.reconfigure(kinds: ["vehicle"], policy: RefreshPolicy(), rulesChanged: ["vehicle"])
        segments.offer(["vehicle"])
        #expect(segments.statistics().segments == 1)
        segments.reconfigure(kinds: ["vehicle"], policy: RefreshPolicy(), rulesChanged: ["vehicle"])
        segments.offer(["vehicle"])
        var statistics = segments.statistics()
        #expect(statistics.segments == 0)
        #expect(statistics.heldOutside == 20)
        #expect(try readerSees(segments, "v-1") == nil, "no segment is offered")
        // The tokens are still the agent's: read back, replaced, removed.
        for index in 0..<20 { #expect(read(segments, "v-\(index)") == "tok-v-\(index)") }
        segments.tokenRemoved(kind: "vehicle", id: "v-0")
        #expect(read(segments, "v-0") == nil)
        #expect(store(segments, "v-1", "tok-v-1-new"), "kept with the others, for the next segment")
        #expect(read(segments, "v-1") == "tok-v-1-new", "the older token is gone")
        #expect(segments.statistics().heldOutside == 19)
        // Within the window, a beat makes none; once it allows a generation again, a beat makes
        // one holding the rest.
        clock.advance(seconds: 59)
        segments.beat()
        #expect(segments.statistics().segments == 0, "still within the minute")
        clock.advance(seconds: 2)
        // A retired generation counts until the kernel has let its memory go: beat until then
        // (the deadline only catches a hang).
        let deadline = ContinuousClock.now + hangLimitDuration
        while segments.statistics().segments == 0, ContinuousClock.now < deadline {
            segments.beat()
            try await Task.sleep(for: .milliseconds(20))
        }
        statistics = segments.statistics()
        #expect(statistics.segments == 1)
        #expect(statistics.heldOutside == 0)
        #expect(statistics.slotsUsed == 19)
        #expect(try readerSees(segments, "v-1") == "tok-v-1-new", "stored while there was no segment")
        for index in 2..<20 {
            #expect(read(segments, "v-\(index)") == "tok-v-\(index)")
            #expect(try readerSees(segments, "v-\(index)") == "tok-v-\(index)", "back in shared memory")
        }
    }
}

/// A boot clock in nanoseconds that moves only when the test steps it.
final class SteppedBootClock: Sendable {
    private let nanoseconds = Atomic<UInt64>(fsm_boottime_ns())

    var now: UInt64 { nanoseconds.load(ordering: .relaxed) }

    func advance(seconds: UInt64) { nanoseconds.add(seconds * 1_000_000_000, ordering: .relaxed) }
}

/// Each id's hint from its last read, as a test's store would keep it.
final class HintBook: Sendable {
    private let hints = Mutex<[String: UInt64]>([:])

    func withLock<R>(_ body: (inout [String: UInt64]) -> R) -> R { hints.withLock { body(&$0) } }
}
