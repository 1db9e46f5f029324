import CSharedMemory
import Foundation
import Synchronization
import Testing
import TokenSegment
import TokenWire

@testable import FleetTokenClient

#if canImport(Glibc)
    import Glibc
#endif

/// ``SegmentReads``, the client's shared-memory read path, over segments made here by the agent's
/// own ``SegmentWriter`` and handed to it as the agent's `SHM` reply hands them out. Validity is
/// set in the segment relative to the clock's now (`CLOCK_BOOTTIME`), so no test waits.
@Suite("Client: segment reads")
struct SegmentReadsTests {
    @Test func aKindsFirstReadAsksForItsSegmentThenReadsTokensFromIt() throws {
        let segment = try TestSegment()
        let expiresAt = segment.put("v-1", "token-one")
        let reads = SegmentReads()
        #expect(reads.read("v-1") == .askForSegment)
        #expect(reads.read("v-1") == .socket, "while the segment is asked for, the socket answers")
        #expect(!reads.isMapped("vehicle"))
        segment.hand(to: reads)
        #expect(reads.isMapped("vehicle"))
        #expect(reads.cached("v-1") == nil, "nothing copied yet")
        #expect(reads.read("v-1") == .token("token-one", expiresAt: expiresAt))
        #expect(reads.cached("v-1") == "token-one", "the copy is kept")
        #expect(reads.hits == 2)
        #expect(reads.read("v-2") == .miss, "an id the segment does not hold is the agent's to answer")
        #expect(reads.read("v-1", kind: "trip") == .askForSegment, "each kind has its own segment")
        #expect(reads.hits == 2)
    }

    @Test func aRewrittenSlotIsReadAgain() throws {
        let segment = try TestSegment()
        let expiresAt = segment.put("v-1", "token-one")
        let reads = SegmentReads()
        segment.hand(to: reads)
        #expect(reads.read("v-1") == .token("token-one", expiresAt: expiresAt))
        #expect(reads.cached("v-1") == "token-one")
        let laterExpiry = segment.put("v-1", "token-two", unixExpiry: expiresAt + 60)
        #expect(reads.cached("v-1") == nil, "the slot changed since it was copied")
        #expect(reads.read("v-1") == .token("token-two", expiresAt: laterExpiry))
        #expect(reads.cached("v-1") == "token-two")
        segment.writer.remove(id: "v-1")
        #expect(reads.cached("v-1") == nil)
        #expect(reads.read("v-1") == .miss)
    }

    /// The agent retires a generation when it rotates to a new one: the client drops its mapping
    /// and asks for the new segment, and reads the new generation's tokens.
    @Test func aRetiredGenerationIsDroppedForTheNextOne() throws {
        let first = try TestSegment(generation: 1)
        let firstExpiry = first.put("v-1", "generation-one")
        let reads = SegmentReads()
        first.hand(to: reads)
        #expect(reads.read("v-1") == .token("generation-one", expiresAt: firstExpiry))
        let second = try TestSegment(generation: 2)
        let secondExpiry = second.put("v-1", "generation-two")
        first.writer.retire()
        #expect(reads.cached("v-1") == nil, "a retired segment's copies are not served")
        #expect(reads.read("v-1") == .socket)
        #expect(!reads.isMapped("vehicle"), "the retired segment is dropped")
        #expect(reads.read("v-1") == .askForSegment, "and the agent's newer one asked for")
        second.hand(to: reads)
        #expect(reads.read("v-1") == .token("generation-two", expiresAt: secondExpiry))
        #expect(reads.cached("v-1") == "generation-two")
    }

    @Test func aSegmentWhoseAgentStoppedBeatingIsDropped() throws {
        let segment = try TestSegment()
        let expiresAt = segment.put("v-1", "token-one")
        let reads = SegmentReads()
        segment.hand(to: reads)
        #expect(reads.read("v-1") == .token("token-one", expiresAt: expiresAt))
        segment.writer.beat(now: fsm_boottime_ns() - 4 * TestSegment.second)
        #expect(reads.cached("v-1") == nil)
        #expect(reads.read("v-1") == .socket)
        #expect(!reads.isMapped("vehicle"))
        #expect(reads.read("v-1") == .askForSegment)
    }

    /// A token without enough validity left is a miss (the agent answers, not the memo); one that
    /// has expired is never served, whatever the caller asks.
    @Test func anExpiredTokenOrOneTooCloseToExpiryIsNotServed() throws {
        let segment = try TestSegment()
        segment.put("expired", "expired-token", left: -1, unixExpiry: TestSegment.unixNow - 1)
        segment.put("under-floor", "under-floor-token", left: 5)
        let lateExpiry = segment.put("late", "late-token", left: 200)
        let shortExpiry = segment.put("short", "short-token", left: 40, lifetime: 120)
        segment.put("shorter", "shorter-token", left: 25, lifetime: 120)
        let reads = SegmentReads()
        segment.hand(to: reads)
        #expect(reads.read("expired", minimumValidity: 0) == .miss)
        #expect(reads.cached("expired", minimumValidity: 0) == nil)
        #expect(reads.read("under-floor", minimumValidity: 0) == .miss, "under the 10 s floor")
        // An hour's token needs 300 s by default; 200 s are left.
        #expect(reads.read("late") == .miss)
        #expect(reads.read("late", minimumValidity: 100) == .token("late-token", expiresAt: lateExpiry))
        #expect(reads.cached("late") == nil, "the copy kept is judged again on every read")
        #expect(reads.cached("late", minimumValidity: 100) == "late-token")
        // A 120 s token needs a quarter of its lifetime: 30 s.
        #expect(reads.read("short") == .token("short-token", expiresAt: shortExpiry))
        #expect(reads.read("shorter") == .miss)
        #expect(reads.hits == 3)
    }

    /// Whatever answers on the socket may hand out a segment: a slot holding what the agent could
    /// never have served is not used, nor kept.
    @Test(arguments: [
        ("bad token", TestSegment.unixNow + 3600),
        ("expiry-two-days-ago", TestSegment.unixNow - 2 * 86_400),
        ("expiry-sixty-days-ahead", TestSegment.unixNow + 60 * 86_400),
    ])
    func aSlotTheAgentCouldNotHaveWrittenIsNotUsed(token: String, unixExpiry: Int64) throws {
        let segment = try TestSegment()
        segment.put("v-1", token, unixExpiry: unixExpiry)
        let reads = SegmentReads()
        segment.hand(to: reads)
        #expect(reads.read("v-1") == .socket)
        #expect(reads.cached("v-1") == nil)
        #expect(reads.hits == 0)
        #expect(reads.isMapped("vehicle"), "the segment stays: only the slot is refused")
    }

    /// A slot whose sequence counter is odd is being written: the read retries, then gives the
    /// key to the socket this once, keeping the segment; once the write ends, it is read.
    @Test func aSlotHeldOddIsRefusedUntilItsWriteEnds() throws {
        let segment = try TestSegment()
        let oneExpiry = segment.put("v-1", "token-one")
        let twoExpiry = segment.put("v-2", "token-two")
        let copy = try WritableCopy(of: segment.writer)
        let slot = try copy.slot(of: "v-1")
        let sequence = copy.sequence(ofSlot: slot)
        #expect(sequence % 2 == 0)
        let reads = SegmentReads()
        copy.hand(to: reads)
        copy.setSequence(ofSlot: slot, to: sequence + 1)
        #expect(reads.read("v-1") == .socket)
        #expect(reads.cached("v-1") == nil)
        #expect(reads.isMapped("vehicle"), "a slot being written is no reason to drop the segment")
        #expect(reads.read("v-2") == .token("token-two", expiresAt: twoExpiry))
        copy.setSequence(ofSlot: slot, to: sequence + 2)
        #expect(reads.read("v-1") == .token("token-one", expiresAt: oneExpiry))
        #expect(reads.cached("v-1") == "token-one")
        // A later write (the counter moves on) makes the copy stale, even with the same bytes.
        copy.setSequence(ofSlot: slot, to: sequence + 3)
        #expect(reads.cached("v-1") == nil)
        copy.setSequence(ofSlot: slot, to: sequence + 4)
        #expect(reads.cached("v-1") == nil, "copied under another sequence value")
        #expect(reads.read("v-1") == .token("token-one", expiresAt: oneExpiry))
    }

    /// The agent's writer rewrites a slot over and over on another thread while another reads it
    /// through the client's read path: every token served is one the writer wrote whole, a read
    /// that kept meeting a write goes to the socket, and the last write is what is read after.
    ///
    /// No test can make a write overlap a copy at will, and the writer stores a slot's words in the
    /// order a reader copies them, so a copy seldom tears even without the sequence check: this is
    /// the read path under a real writer, not a proof of the check. ``aSlotHeldOddIsRefusedUntilItsWriteEnds``
    /// checks the counter itself.
    @Test func aSlotRewrittenWhileItIsReadIsNeverServedTorn() async throws {
        let segment = try TestSegment()
        let tokens = [String(repeating: "a", count: 700), String(repeating: "b", count: 700)]
        let expiresAt = segment.put("v-1", tokens[0])
        let reads = SegmentReads()
        segment.hand(to: reads)
        let writes = 20_001
        let writing = Flag()
        let writer = Unchecked(segment.writer)
        let seen = await withCheckedContinuation { (done: CheckedContinuation<[String: Int], Never>) in
            Thread {
                let expiry = fsm_boottime_ns() + 3600 * TestSegment.second
                for index in 1...writes {
                    _ = writer.value.put(
                        id: "v-1",
                        token: tokens[index % 2],
                        expiry: expiry,
                        lifetime: 3600 * TestSegment.second,
                        unixExpiry: expiresAt
                    )
                }
                writing.value.store(false, ordering: .releasing)
            }.start()
            Thread {
                var seen: [String: Int] = [:]
                func readOnce() -> String {
                    let jwt: String?
                    if let cached = reads.cached("v-1") {
                        jwt = cached
                    } else if case .token(let read, _) = reads.read("v-1") {
                        jwt = read
                    } else {
                        return "socket"
                    }
                    return jwt == tokens[0] ? "a" : jwt == tokens[1] ? "b" : "torn"
                }
                while writing.value.load(ordering: .acquiring) { seen[readOnce(), default: 0] += 1 }
                // The writer is done: what it wrote last is read, whole.
                seen["last " + readOnce(), default: 0] += 1
                done.resume(returning: seen)
            }.start()
        }
        #expect(seen["torn"] == nil, "\(seen)")
        #expect(Set(seen.keys).isSubset(of: ["a", "b", "socket", "last b"]), "\(seen)")
        #expect(seen["last b"] == 1, "the last write, \(writes), is b's: \(seen)")
    }

    @Test(arguments: [
        ("layout=9", "vehicle", true),
        ("size", "vehicle", true),
        ("no descriptor", "vehicle", false),
        ("other kind", "trip", true),
    ])
    func aSegmentReplyThatDoesNotMatchItsFileIsNotMapped(problem: String, kind: String, descriptor: Bool) throws {
        let segment = try TestSegment(kind: kind)
        segment.put("v-1", "token-one")
        let reads = SegmentReads()
        #expect(reads.read("v-1") == .askForSegment)
        let size = problem == "size" ? segment.writer.size + 4096 : segment.writer.size
        let layout = problem.hasPrefix("layout=") ? "layout=9" : "layout=\(SegmentLayout.version)"
        reads.received(
            kind: "vehicle",
            reply: .ok("size=\(size) \(layout) generation=1"),
            descriptor: descriptor ? fsm_reopen_read_only(segment.writer.descriptor) : nil
        )
        #expect(!reads.isMapped("vehicle"))
        #expect(reads.read("v-1") == .socket, "not asked for again at once")
    }

    @Test func aRefusedSegmentIsNotAskedForAgainAtOnce() throws {
        let reads = SegmentReads()
        #expect(reads.read("v-1") == .askForSegment)
        reads.received(kind: "vehicle", reply: .error(WireError(.busy, "too many segments")), descriptor: nil)
        #expect(!reads.isMapped("vehicle"))
        #expect(reads.read("v-1") == .socket)
        #expect(reads.read("v-1", kind: "trip") == .askForSegment, "another kind is asked for")
    }

    /// Keys read from memory are reported (`TOUCH`) so the agent keeps refreshing them: each once
    /// per report, however often it was read.
    @Test func keysReadFromMemoryAreReportedOncePerInterval() throws {
        let segment = try TestSegment(idleTimeout: 600)
        segment.put("v-1", "token-one")
        segment.put("v-2", "token-two")
        let reads = SegmentReads()
        segment.hand(to: reads)
        #expect(reads.reportInterval == 60, "a quarter of the idle time-out, at most 60 s")
        _ = reads.read("v-1")
        _ = reads.read("v-2")
        _ = reads.cached("v-1")
        #expect(touched(reads.takeTouches()) == ["vehicle": ["v-1", "v-2"]])
        #expect(touched(reads.takeTouches()).isEmpty, "nothing read since")
        _ = reads.cached("v-2")
        _ = reads.cached("v-2")
        #expect(touched(reads.takeTouches()) == ["vehicle": ["v-2"]])
        let quick = try TestSegment(kind: "trip", idleTimeout: 2)
        quick.hand(to: reads, as: "trip")
        #expect(reads.reportInterval == 1, "at least every second")
    }

    private func touched(_ requests: [WireRequest]) -> [String: Set<String>] {
        var touched: [String: Set<String>] = [:]
        for request in requests {
            guard case .touch(let kind, let ids) = request else {
                Issue.record("not a TOUCH: \(request.line)")
                continue
            }
            touched[kind, default: []].formUnion(ids)
        }
        return touched
    }

    // MARK: Through the client

    /// A client whose agent cannot be reached, and gives up at once.
    private func unreachableClient() -> FleetTokenClient {
        var configuration = FleetTokenClient.Configuration()
        configuration.reconnectDeadline = 0
        return FleetTokenClient(socketPath: "/nonexistent/fleet-tokend-test.sock", configuration: configuration)
    }

    @Test func theClientReadsAMappedKindWithoutAskingTheAgent() async throws {
        let segment = try TestSegment()
        let expiresAt = segment.put("v-1", "token-one")
        let client = unreachableClient()
        segment.hand(to: client.segments)
        let token = try await client.token(.vehicle("v-1"))
        #expect(token == Token(jwt: "token-one", expiresAt: Date(timeIntervalSince1970: TimeInterval(expiresAt))))
        #expect(client.tokenFromMemory(.vehicle("v-1"), minimumValidity: nil) == token, "the copy answers next")
        #expect(client.sharedMemoryReads == 2)
        #expect(client.localCounters.requests == 0)
    }

    /// A token the segment holds without enough validity is the agent's to replace: the memo is
    /// not asked, even when it holds one.
    @Test func aSegmentMissGoesToTheAgentNotTheMemo() async throws {
        let segment = try TestSegment()
        segment.put("v-1", "expired-token", left: -1, unixExpiry: TestSegment.unixNow - 1)
        let client = unreachableClient()
        segment.hand(to: client.segments)
        client.memo.remember(
            Token(jwt: "memo-token", expiresAt: Date(timeIntervalSinceNow: 3600)),
            for: .vehicle("v-1")
        )
        let error = await #expect(throws: FleetTokenError.self) { try await client.token(.vehicle("v-1")) }
        #expect(error?.isAgentUnreachable == true, "\(String(describing: error))")
        #expect(client.localCounters.requests == 1)
        #expect(client.localCounters.memoHits == 0)
        #expect(client.sharedMemoryReads == 0)
    }
}

/// A flag one thread lowers and another watches.
final class Flag: Sendable {
    let value = Atomic(true)
}

/// A value handed to another thread that the test alone coordinates.
struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
