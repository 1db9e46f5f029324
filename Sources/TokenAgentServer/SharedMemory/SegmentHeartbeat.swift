import ServiceLifecycle

/// Beats the shared-memory segments once a second (readers ignore a segment whose beat is over
/// 3 s old) and lets them rotate; on shutdown the agent retires them.
public struct SegmentHeartbeat: Service {
    private let segments: SharedSegments
    private let interval: Duration

    /// Beats `segments` every `interval`.
    public init(segments: SharedSegments, interval: Duration = .seconds(1)) {
        self.segments = segments
        self.interval = interval
    }

    public func run() async throws {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            segments.startBeat()
            // A rotation's copy and wipe, a batch at a time, with a pause between batches so the
            // requests waiting for the segments' lock take it first.
            while segments.advanceBuilding(batch: SharedSegments.buildBatch), !Task.isCancelled {
                try? await Task.sleep(for: .microseconds(200))
            }
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
        }
    }
}
