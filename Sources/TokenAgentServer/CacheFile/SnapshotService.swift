import ServiceLifecycle
import TokenAgent

/// The cache snapshot's writes while the agent runs, as a service: one pass at once (the tokens
/// just adopted, so a crash in the first interval loses nothing), then one every `interval`
/// seconds (`cache_file_interval`; 0: none until the stop). The write at stop is the runtime's,
/// once the socket has stopped taking requests; this service ends before it, its pass in progress
/// finished.
public struct SnapshotService: Service {
    private let writer: SnapshotWriter
    private let interval: Double

    /// Writes through `writer` now and every `interval` seconds (0: only now).
    public init(writer: SnapshotWriter, interval: Double) {
        self.writer = writer
        self.interval = interval
    }

    public func run() async throws {
        await writer.writeOffLoop(reason: "start")
        guard interval > 0 else {
            try? await gracefulShutdown()
            return
        }
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                try await cancelWhenGracefulShutdown {
                    try await Task.sleep(for: .milliseconds(Int64(interval * 1000)))
                }
            } catch {
                return
            }
            await writer.writeOffLoop(reason: "interval")
        }
    }
}
