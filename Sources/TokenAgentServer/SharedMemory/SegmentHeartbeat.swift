import ServiceLifecycle
import Synchronization
import TokenAgent
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// Beats the shared-memory segments once a second (readers ignore a segment whose beat is over
/// 3 s old) and lets them rotate; on shutdown the agent retires them.
///
/// It is woken by a ticker every `interval` for the beat, and by a store that started a build (a
/// segment three quarters full grows beside itself) or switched to one (the old one's wipe), so a
/// copy starts at once rather than at the next beat ("upkeep", ``SharedSegments/Upkeep``).
public struct SegmentHeartbeat: Service {
    private let segments: SharedSegments
    private let interval: Duration

    /// Beats `segments` every `interval`, and copies what their stores ask for when they ask.
    public init(segments: SharedSegments, interval: Duration = .seconds(1)) {
        self.segments = segments
        self.interval = interval
    }

    public func run() async throws {
        let segments = segments
        let interval = interval
        let ticker = Task {
            while !Task.isCancelled {
                segments.requestUpkeep(.beat)
                try? await Task.sleep(for: interval)
            }
        }
        defer { ticker.cancel() }
        await cancelWhenGracefulShutdown {
            for await reason in segments.upkeep {
                if case .beat = reason { segments.startBeat() }
                if segments.advanceBuilding(batch: SharedSegments.buildBatch) {
                    await Self.copyTheRest(of: segments, beatingEvery: interval)
                }
            }
        }
    }

    /// A build's copy and the wipe of the generation it replaced, a batch at a time, on a thread
    /// of its own: a pause of 200 µs between batches lets the requests waiting for the kind's
    /// lock take it first, and must not wait behind whatever else Swift concurrency's pool runs
    /// (a busy issuer's signing made each pause last tens of milliseconds there). Beats go on
    /// meanwhile, however long the copy; cancelling stops it between batches.
    private static func copyTheRest(of segments: SharedSegments, beatingEvery interval: Duration) async {
        let stop = Atomic(false)
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                DetachedThread.start {
                    let clock = ContinuousClock()
                    var lastBeat = clock.now
                    while !stop.load(ordering: .relaxed), segments.advanceBuilding(batch: SharedSegments.buildBatch) {
                        usleep(200)
                        if clock.now - lastBeat >= interval {
                            segments.startBeat()
                            lastBeat = clock.now
                        }
                    }
                    continuation.resume()
                }
            }
        } onCancel: {
            stop.store(true, ordering: .relaxed)
        }
    }
}
