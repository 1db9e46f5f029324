import ServiceLifecycle
import TokenAgent

/// The background refresher, as a service: once a second, starts the refreshes that are due and
/// drops idle expired entries.
public struct RefreshScheduler: Service {
    private let engine: TokenEngine
    private let interval: Duration

    /// Creates a scheduler for `engine` that wakes every `interval`.
    public init(engine: TokenEngine, interval: Duration = .seconds(1)) {
        self.engine = engine
        self.interval = interval
    }

    public func run() async throws {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
            engine.maintain()
        }
    }
}
