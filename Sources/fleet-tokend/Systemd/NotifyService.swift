import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Systemd
import TokenAgentServer

/// Keeps systemd informed: `STATUS=` every few seconds when it changed, `WATCHDOG=1` at half of
/// `WatchdogSec=` while the event loops answer and the refresher keeps beating, and `STOPPING=1`
/// when shutdown begins. (`READY=1` is sent by the server once it listens.)
struct NotifyService: Service {
    let notifier: SystemdNotifier
    let status: AgentStatus
    let heartbeat: RefresherHeartbeat
    let group: any EventLoopGroup
    /// Whether the socket server's own loop runs a task promptly.
    let socketLoopAnswers: @Sendable () async -> Bool
    let logger: Logger
    var statusInterval: Duration = .seconds(5)

    func run() async throws {
        guard notifier.isEnabled else {
            try? await gracefulShutdown()
            return
        }
        let watchdog = notifier.watchdogInterval.map { $0 / 2 }
        if let watchdog { logger.info("watchdog enabled", metadata: ["ping_interval": "\(watchdog)"]) }
        let tick = min(watchdog ?? statusInterval, statusInterval)
        var lastStatus = ""
        var sinceStatus = statusInterval
        var sinceWatchdog = watchdog ?? .zero
        while !Task.isShuttingDownGracefully {
            if let watchdog, sinceWatchdog >= watchdog, await isAlive() {
                notifier.watchdog()
                sinceWatchdog = .zero
            }
            if sinceStatus >= statusInterval {
                let summary = status.summary()
                if summary != lastStatus { notifier.status(summary) }
                lastStatus = summary
                sinceStatus = .zero
            }
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: tick) }
            } catch {
                break
            }
            sinceStatus += tick
            sinceWatchdog += tick
        }
        notifier.stopping()
        notifier.status("stopping: finishing replies")
    }

    /// Whether every event loop (SwiftNIO's, and the socket's own) runs a task promptly and the
    /// refresher made a pass recently.
    private func isAlive() async -> Bool {
        guard !status.health.refresherStalled else {
            logger.error(
                "refresher stalled: no watchdog ping",
                metadata: ["seconds": "\(Int(heartbeat.secondsSinceLastBeat))"]
            )
            return false
        }
        for loop in group.makeIterator() {
            do {
                try await loop.submit {}.get()
            } catch {
                return false
            }
        }
        guard await socketLoopAnswers() else {
            logger.error("socket loop stuck: no watchdog ping")
            return false
        }
        return true
    }
}
