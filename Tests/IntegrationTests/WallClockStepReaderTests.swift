import Foundation
import Logging
import Synchronization
import Testing
import TokenAgent
import TokenAgentServer
import TokenSegment

#if canImport(Glibc)
    import Glibc
#endif

/// The machine's clocks, with the wall clock steppable by the test (the agent's view of an NTP
/// step): the monotonic (boot) clock is the real one, which the C reader judges slots by.
private final class SteppableClock: AgentClock, Sendable {
    private let offset = Mutex(0.0)
    private let system = SystemAgentClock()

    var monotonicSeconds: Double { system.monotonicSeconds }
    var wallSeconds: Double { system.wallSeconds + offset.withLock { $0 } }

    func stepWall(_ seconds: Double) { offset.withLock { $0 += seconds } }
}

/// Mints one hour tokens by the steppable wall clock; every fetch after the first fails, so what
/// shared memory holds after a step is the first token, as the agent moved it.
private final class OnceProvider: TokenProvider, Sendable {
    private let clock: SteppableClock
    private let fetches = Atomic(0)

    init(clock: SteppableClock) { self.clock = clock }

    var summary: String { "once" }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        let count = fetches.add(1, ordering: .relaxed).newValue
        guard count == 1 else { throw ProviderError.failed("down") }
        return FetchedToken(token: "tok-\(key.id)-1", expiresAtUnixSeconds: clock.wallSeconds + 3600)
    }
}

@Suite("A wall-clock step, read through the C reader", .enabled(if: CReader.available, "needs a C compiler"))
struct WallClockStepReaderTests {
    /// The agent's engine and segments (in this process) hold a token; the C reader (another
    /// process, judging by the boot clock) finds it. The wall clock steps 3,400 s forward: by its
    /// `exp` the token has 200 s left, under the 300 s a read needs. Once the scheduler's pass has
    /// seen the step, the reader misses it (it found it, with an hour left, before).
    @Test func aStepForwardTakesTheTokenFromTheReaderAtOnce() async throws {
        _ = try await CReader.path()  // built before the heartbeat's first beat
        let clock = SteppableClock()
        let segments = SharedSegments(kinds: ["vehicle"], policy: RefreshPolicy(), logger: Logger(label: "test"))
        defer { segments.retireAll() }
        // The agent's heartbeat: a reader takes a segment whose last beat is over 3 s old for a
        // dead agent's, which a loaded machine could otherwise make this one look like.
        let heartbeat = Task { try await SegmentHeartbeat(segments: segments, interval: .milliseconds(500)).run() }
        defer { heartbeat.cancel() }
        let engine = TokenEngine(
            providers: ["vehicle": OnceProvider(clock: clock)],
            clock: clock,
            storage: segments,
            logger: Logger(label: "test")
        )
        _ = engine.maintain()  // the wall-clock watch's first look
        let fetchedFrom = clock.wallSeconds
        let first = try await engine.get(kind: "vehicle", id: "v-1").get()
        let fetchedBy = clock.wallSeconds
        #expect(first.token == "tok-v-1-1")
        segments.beat()
        guard case .offered(let offer) = segments.offer(kind: "vehicle", unlessAlreadySent: { _ in false }) else {
            Issue.record("no segment offered")
            return
        }
        let agent = try HostileAgent { _ in
            .line(
                "OK size=\(offer.size) layout=\(SegmentLayout.version) generation=\(offer.generation)",
                descriptors: [offer.descriptor]
            )
        }
        defer {
            agent.stop()
            close(offer.descriptor)
        }
        let reader = try await SegmentReaderProcess(socket: agent.socketPath, kind: "vehicle")
        defer { reader.stop() }
        #expect(reader.greeting?.hasPrefix("SEGMENT ") == true, "\(reader.greeting ?? "no greeting")")
        #expect(try await reader.ask("v-1")?.hasPrefix("HIT tok-v-1-1 ") == true)

        clock.stepWall(3_400)
        _ = engine.maintain()
        segments.beat()
        #expect(try await reader.ask("v-1") == "MISS", "200 s left by the corrected clock: not a read's token")
        // The token's `exp` is as it was, an hour from its fetch by the clock before the step (so
        // about 200 s ahead by the corrected clock, less the time the test took).
        let info = try #require(try engine.info(kind: "vehicle", id: "v-1").get())
        let expiry = try #require(info.expiresAt).seconds
        // (Whole seconds either side: the expiry may be kept rounded.)
        #expect(expiry >= fetchedFrom + 3599 && expiry <= fetchedBy + 3601, "\(expiry - fetchedFrom)")
    }
}
