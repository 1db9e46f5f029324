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
            segments.beat()
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
        }
    }
}
