import ServiceLifecycle
import TokenAgent

/// The background refresher, as a service: once a second, starts the refreshes that are due and
/// drops idle expired entries.
public struct RefreshScheduler: Service {
    private let engine: TokenEngine
    private let interval: Duration
    private let heartbeat: RefresherHeartbeat

    /// Creates a scheduler for `engine` that wakes every `interval` and beats `heartbeat` after
    /// every pass.
    public init(
        engine: TokenEngine,
        interval: Duration = .seconds(1),
        heartbeat: RefresherHeartbeat = RefresherHeartbeat()
    ) {
        self.engine = engine
        self.interval = interval
        self.heartbeat = heartbeat
    }

    public func run() async throws {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
            engine.maintain()
            heartbeat.beat()
        }
    }
}
