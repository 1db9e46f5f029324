import CSocketLoop
import Logging
import Synchronization
import Testing
import TokenAgent
import TokenAgentServer
import TokenWire

/// Where a cache snapshot's work runs: a periodic pass copies the tokens out of the store at the
/// agent's priority (the copy takes the locks GETs take) and checksums and writes them only when
/// no other thread wants a core; the write at stop runs on its caller's thread, as it is.
@Suite("Snapshot writer: the priority of each part of a pass")
struct SnapshotSchedulingTests {
    /// How the calling thread was scheduled: idle (SCHED_IDLE) or not, and its nice value.
    struct Scheduling: Equatable {
        var idle: Bool
        var niceness: Int32

        static func ofThisThread() -> Scheduling? {
            var niceness: Int32 = 0
            let idle = fsl_thread_scheduling(&niceness)
            return idle < 0 ? nil : Scheduling(idle: idle == 1, niceness: niceness)
        }
    }

    /// The scheduling of each thread that called ``record()``, in order.
    final class SchedulingLog: Sendable {
        private let seen = Mutex<[Scheduling?]>([])
        func record() { seen.withLock { $0.append(Scheduling.ofThisThread()) } }
        var all: [Scheduling?] { seen.withLock { $0 } }
    }

    /// A destination that records the scheduling of the thread that writes to it.
    final class Observed: SnapshotDestination {
        let name = "file"
        let medium = TokenCacheMedium.disk
        let seen = SchedulingLog()
        func write(_ snapshot: CacheSnapshot.Encoded) throws { seen.record() }
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

    @Test func aPeriodicPassCopiesAtTheAgentsPriorityAndWritesWhenTheCoresAreIdle() async throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let caller = try #require(Scheduling.ofThisThread())
        #expect(await writer(to: destination, digestsSeen: digestsSeen).writeOffLoop(reason: "interval"))
        // The digests are read before the copy and again after it, before the thread yields.
        let copying = digestsSeen.all
        #expect(copying.count == 2)
        #expect(copying.allSatisfy { $0 == caller })
        #expect(destination.seen.all == [Scheduling(idle: true, niceness: caller.niceness)])
        // Only the pass's own thread changed: the caller's is as it was.
        #expect(Scheduling.ofThisThread() == caller)
    }

    @Test func theWriteAtStopRunsOnTheCallersThreadAsItIs() throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let caller = try #require(Scheduling.ofThisThread())
        #expect(writer(to: destination, digestsSeen: digestsSeen).write(reason: "stop"))
        #expect(destination.seen.all == [caller])
        #expect(digestsSeen.all.allSatisfy { $0 == caller })
    }

    @Test func eachPassHasAThreadOfItsOwn() async throws {
        let destination = Observed()
        let digestsSeen = SchedulingLog()
        let writer = writer(to: destination, digestsSeen: digestsSeen)
        let caller = try #require(Scheduling.ofThisThread())
        for _ in 0..<3 { #expect(await writer.writeOffLoop(reason: "interval")) }
        // A thread made idle by one pass would copy the next one's tokens idle too.
        #expect(digestsSeen.all.count == 6)
        #expect(digestsSeen.all.allSatisfy { $0 == caller })
        #expect(destination.seen.all.allSatisfy { $0?.idle == true })
    }
}
