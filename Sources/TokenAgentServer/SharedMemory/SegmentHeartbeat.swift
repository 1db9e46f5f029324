import ServiceLifecycle

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
            let clock = ContinuousClock()
            var lastBeat = clock.now - interval
            for await reason in segments.upkeep {
                if case .beat = reason {
                    segments.startBeat()
                    lastBeat = clock.now
                }
                // A build's copy and the wipe of the generation it replaced, a batch at a time,
                // with a pause between batches so the requests waiting for the kind's lock take
                // it first; beats go on meanwhile, however long the copy.
                while segments.advanceBuilding(batch: SharedSegments.buildBatch), !Task.isCancelled {
                    try? await Task.sleep(for: .microseconds(200))
                    if clock.now - lastBeat >= interval {
                        segments.startBeat()
                        lastBeat = clock.now
                    }
                }
            }
        }
    }
}
