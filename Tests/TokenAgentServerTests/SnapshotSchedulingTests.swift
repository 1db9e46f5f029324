import CSocketLoop
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
import TokenAgent
import TokenAgentServer
import TokenWire

/// Where a cache snapshot's work runs: a periodic pass on a thread of its own, its copy (and the
/// writes streamed with it) at the agent's priority, since the copy takes the locks GETs take (it
/// rests instead, ``SnapshotPacing``), and its commits only when no other thread wants a core; the
/// write at stop on its caller's thread, as it is.
@Suite("Snapshot writer: the thread and priority of each part of a pass")
struct SnapshotSchedulingTests {
    /// Which thread ran, and how it was scheduled: idle (SCHED_IDLE) or not, and its nice value.
    struct Scheduling: Equatable {
        var thread: Int32
        var idle: Bool
        var niceness: Int32

        static func ofThisThread() -> Scheduling? {
            var niceness: Int32 = 0
            let idle = fsl_thread_scheduling(&niceness)
            return idle < 0 ? nil : Scheduling(thread: fsl_thread_id(), idle: idle == 1, niceness: niceness)
        }

        /// The same scheduling on the thread `thread`.
        func on(_ thread: Int32) -> Scheduling {
            Scheduling(thread: thread, idle: idle, niceness: niceness)
        }
    }

    /// The scheduling of each thread that called ``record()``, in order.
    final class SchedulingLog: Sendable {
        private let seen = Mutex<[Scheduling?]>([])
        func record() { seen.withLock { $0.append(Scheduling.ofThisThread()) } }
        var all: [Scheduling?] { seen.withLock { $0 } }
    }

    /// A destination that records the scheduling of the thread that writes to it.
    final class Observed: WholeSnapshotDestination {
        let name = "file"
        let medium = TokenCacheMedium.disk
        let seen = SchedulingLog()
        func received(_ bytes: [UInt8]) throws { seen.record() }
    }

    /// A writer of one cached token to `destination`, whose provider digests (read before and
    /// after the copy out of the store) record the scheduling of the thread reading them.
    private func writer(to destination: Observed, digestsSeen: SchedulingLog) -> SnapshotWriter {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        engine.importTokens(
            [CachedToken(kind: "vehicle", id: "v-1", token: "tok", expiresAt: expiresAt)],
            from: .memory
        )
        return SnapshotWriter(
            engine: engine,
            destinations: [destination],
            digests: {
                digestsSeen.record()
                return ["vehicle": "digest"]
            },
            statistics: SnapshotStatistics(destinations: ["file"]),
            logger: Logger(label: "test")
        )
    }

    @Test func aPeriodicPassCopiesOnAThreadOfItsOwnAtTheAgentsPriorityAndCommitsWhenTheCoresAreIdle() async throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let caller = try #require(Scheduling.ofThisThread())
        #expect(await writer(to: destination, digestsSeen: digestsSeen).writeOffLoop(reason: "interval"))
        // The digests are read before the copy and again after it; the commit follows.
        let copying = digestsSeen.all.compactMap { $0 }
        #expect(copying.count == 2)
        let pass = try #require(copying.first?.thread)
        #expect(pass != caller.thread, "not the caller's thread")
        #expect(copying.allSatisfy { $0 == caller.on(pass) })
        #expect(destination.seen.all == [Scheduling(thread: pass, idle: true, niceness: caller.niceness)])
        // Only the pass's own thread changed: the pool's threads are as they were.
        let after = try #require(Scheduling.ofThisThread())
        #expect(after == caller.on(after.thread))
    }

    /// A destination that records the scheduling of the thread at each piece appended and at
    /// the commit.
    final class Streamed: SnapshotDestination {
        let name = "file"
        let medium = TokenCacheMedium.disk
        let appends = SchedulingLog()
        let commits = SchedulingLog()
        func begin() throws -> any SnapshotSink { Sink(self) }

        final class Sink: SnapshotSink {
            let destination: Streamed
            init(_ destination: Streamed) { self.destination = destination }
            func append(_ bytes: UnsafeRawBufferPointer) throws { destination.appends.record() }
            func commit(_ framing: CacheSnapshot.Encoded) throws { destination.commits.record() }
            func abandon() {}
        }
    }

    @Test func theWritesStreamedWithTheCopyRunAtTheAgentsPriorityAndOnlyTheCommitIdle() async throws {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        let padding = String(repeating: "x", count: 500)
        let tokens = (0..<1000).map {
            CachedToken(kind: "vehicle", id: "v-\($0)", token: "tok-\($0).\(padding)", expiresAt: expiresAt)
        }
        engine.importTokens(tokens, from: .memory)
        let destination = Streamed()
        let writer = SnapshotWriter(
            engine: engine,
            destinations: [destination],
            digests: { ["vehicle": "digest"] },
            statistics: SnapshotStatistics(destinations: ["file"]),
            logger: Logger(label: "test")
        )
        let caller = try #require(Scheduling.ofThisThread())
        #expect(await writer.writeOffLoop(reason: "interval"))
        // Some 520 KB of body: several pieces, each written as it is encoded.
        let appends = destination.appends.all.compactMap { $0 }
        #expect(appends.count >= 5)
        #expect(appends.allSatisfy { !$0.idle && $0.niceness == caller.niceness && $0.thread != caller.thread })
        let commits = destination.commits.all.compactMap { $0 }
        #expect(commits.count == 1)
        #expect(commits.allSatisfy { $0.idle && $0.thread == appends.first?.thread })
    }

    @Test func theWriteAtStopRunsOnTheCallersThreadAsItIs() throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let caller = try #require(Scheduling.ofThisThread())
        #expect(writer(to: destination, digestsSeen: digestsSeen).write(reason: "stop"))
        #expect(destination.seen.all == [caller])
        #expect(digestsSeen.all.allSatisfy { $0 == caller })
    }

    /// A destination whose write waits, on the pass's thread, until the test lets it go.
    final class Held: WholeSnapshotDestination {
        let name = "held"
        let medium = TokenCacheMedium.disk
        private let state = Mutex<(entered: Int, released: Bool)>((0, false))
        func received(_ bytes: [UInt8]) throws {
            state.withLock { $0.entered += 1 }
            while !state.withLock({ $0.released }) { usleep(1000) }
        }
        var entered: Int { state.withLock { $0.entered } }
        func release() { state.withLock { $0.released = true } }
    }

    /// A destination that counts its writes.
    final class Counted: WholeSnapshotDestination {
        let name = "counted"
        let medium = TokenCacheMedium.memory
        private let count = Mutex(0)
        func received(_ bytes: [UInt8]) throws { count.withLock { $0 += 1 } }
        var writes: Int { count.withLock { $0 } }
    }

    @Test func aPassOffTheLoopIsGivenUpAtStopAndTheWriteAtStopIsWhole() async throws {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider()])
        let expiresAt = Int64(SystemAgentClock().wallSeconds) + 3000
        engine.importTokens(
            [CachedToken(kind: "vehicle", id: "v-1", token: "tok", expiresAt: expiresAt)],
            from: .memory
        )
        let held = Held()
        let counted = Counted()
        let statistics = SnapshotStatistics(destinations: ["held", "counted"])
        let writer = SnapshotWriter(
            engine: engine,
            destinations: [held, counted],
            digests: { ["vehicle": "digest"] },
            statistics: statistics,
            logger: Logger(label: "test")
        )
        let pass = Task { await writer.writeOffLoop(reason: "interval") }
        #expect(await eventually { held.entered == 1 })
        // The agent stops while the pass is in its first destination.
        writer.giveUpPassesOffLoop()
        held.release()
        #expect(await pass.value == false)
        #expect(counted.writes == 0, "the pass gave up before its next destination")
        #expect(statistics.counts.writes == 0)
        #expect(statistics.counts.failures.values.allSatisfy { $0 == 0 }, "giving up is not a failure")
        // Passes off the loop after it give up at once; the write at stop is whole.
        #expect(await writer.writeOffLoop(reason: "interval") == false)
        #expect(held.entered == 1)
        #expect(writer.write(reason: "stop"))
        #expect(held.entered == 2)
        #expect(counted.writes == 1)
        #expect(statistics.counts.writes == 1)
    }

    @Test func eachPassHasAThreadOfItsOwn() async throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let writer = writer(to: destination, digestsSeen: digestsSeen)
        let caller = try #require(Scheduling.ofThisThread())
        for _ in 0..<3 { #expect(await writer.writeOffLoop(reason: "interval")) }
        // A thread made idle by one pass would copy the next one's tokens idle too.
        #expect(digestsSeen.all.count == 6)
        #expect(digestsSeen.all.allSatisfy { $0?.idle == false && $0?.niceness == caller.niceness })
        #expect(destination.seen.all.count == 3)
        #expect(destination.seen.all.allSatisfy { $0?.idle == true })
    }
}
