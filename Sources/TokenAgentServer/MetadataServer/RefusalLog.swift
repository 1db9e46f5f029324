import Logging
import NIOCore
import Synchronization

/// The log lines of the metadata endpoint's refusals (403s), summarised per peer and interval so
/// that one local user's requests cost a bounded share of the log, as the socket's denials do.
///
/// A peer's first refusal in an interval is logged at info as it comes (`metadata endpoint:
/// request refused`, with its uid, status, method); the others of that interval are counted, and
/// when it ends one summary line at info says how many were left out (`metadata endpoint:
/// refusals left out of the log`, `left_out=N`). A peer refused without pause gets at most two
/// lines an interval. Peers are told apart by uid; every unidentified peer is one peer, and past
/// ``maxPeers`` at once the others share one line too.
final class RefusalLog: Sendable {
    private struct Window {
        var started: NIODeadline
        var leftOut = 0
        var summaryScheduled = false
    }

    /// Peers tracked at once; past it, the rest are summarised together.
    static let maxPeers = 1024
    static let othersKey = "other peers"

    private let windows = Mutex<[String: Window]>([:])
    private let interval: TimeAmount
    private let logger: Logger
    private let eventLoop: any EventLoop

    /// Logs to `logger`, summarising each peer's refusals over `interval`, with the summaries
    /// timed on `eventLoop`.
    init(interval: TimeAmount, logger: Logger, eventLoop: any EventLoop) {
        self.interval = interval
        self.logger = logger
        self.eventLoop = eventLoop
    }

    /// A refusal of `peer` (its uid, or why it has none), logged with `metadata` unless it is left
    /// out of this interval's log.
    func refused(uid: UInt32?, metadata: Logger.Metadata) {
        let now = NIODeadline.now()
        let candidate = uid.map { "uid \($0)" } ?? "unidentified"
        enum Decision {
            case log
            case leftOut(summaryAt: NIODeadline?, key: String)
        }
        let decision = windows.withLock { windows -> Decision in
            var key = candidate
            if windows[key] == nil, windows.count >= Self.maxPeers {
                // Intervals over with nothing left out need no summary: forget them first.
                windows = windows.filter { $0.value.summaryScheduled || now - $0.value.started < interval }
                if windows.count >= Self.maxPeers { key = Self.othersKey }
            }
            if var window = windows[key], now - window.started < interval {
                window.leftOut += 1
                let schedule = !window.summaryScheduled
                window.summaryScheduled = true
                windows[key] = window
                return .leftOut(summaryAt: schedule ? window.started + interval : nil, key: key)
            }
            windows[key] = Window(started: now)
            return .log
        }
        switch decision {
        case .log:
            logger.info("metadata endpoint: request refused", metadata: metadata)
        case .leftOut(let summaryAt, let key):
            guard let summaryAt else { return }
            let peerMetadata: Logger.Metadata =
                if let uid, key == candidate { ["uid": "\(uid)"] } else { ["peer": "\(key)"] }
            _ = eventLoop.scheduleTask(deadline: summaryAt) { [self] in
                summarise(key: key, metadata: peerMetadata)
            }
        }
    }

    /// The interval of `key` is over: one line says how many of its refusals were left out.
    private func summarise(key: String, metadata: Logger.Metadata) {
        let leftOut = windows.withLock { windows -> Int in
            let count = windows[key]?.leftOut ?? 0
            windows[key] = nil
            return count
        }
        guard leftOut > 0 else { return }
        var metadata = metadata
        metadata["left_out"] = "\(leftOut)"
        metadata["interval_s"] = "\(Double(interval.nanoseconds) / 1e9)"
        logger.info("metadata endpoint: refusals left out of the log", metadata: metadata)
    }
}
