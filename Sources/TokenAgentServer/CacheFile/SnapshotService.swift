import ServiceLifecycle
import TokenAgent

/// The cache snapshot's writes while the agent runs, as a service: one pass at once (the tokens
/// just adopted, so a crash in the first interval loses nothing), then one every `interval`
/// seconds (`cache_file_interval`; 0: none until the stop). The write at stop is the runtime's,
/// once the socket has stopped taking requests; this service ends before it, its pass in progress
/// given up at its next step.
public struct SnapshotService: Service {
    private let writer: SnapshotWriter
    private let interval: Double

    /// Writes through `writer` now and every `interval` seconds (0: only now).
    public init(writer: SnapshotWriter, interval: Double) {
        self.writer = writer
        self.interval = interval
    }

    public func run() async throws {
        await pass(reason: "start")
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
            await pass(reason: "interval")
        }
    }

    /// A pass off the loop, given up when the graceful shutdown begins: it may be waiting for an
    /// idle core, and the write at stop, which follows this service's end, need not wait for it.
    private func pass(reason: String) async {
        let writer = self.writer
        _ = await withGracefulShutdownHandler {
            await writer.writeOffLoop(reason: reason)
        } onGracefulShutdown: {
            writer.giveUpPassesOffLoop()
        }
    }
}
