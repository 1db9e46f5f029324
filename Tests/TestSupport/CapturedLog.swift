import Logging
import Synchronization

/// Every entry a logger made, kept for the test to read, one line each:
/// `<level> <message> <key>=<value> ...`, the logger's metadata and the entry's merged (the
/// entry's win) and sorted by key, with an attached error as `error.message`.
public final class CapturedLog: Sendable {
    public let lines = Mutex<[String]>([])

    public init() {}

    /// A logger at `level` writing here.
    public func logger(label: String = "captured", level: Logger.Level = .trace) -> Logger {
        var logger = Logger(label: label) { _ in Handler(log: self) }
        logger.logLevel = level
        return logger
    }

    /// Every line so far, one after another.
    public var text: String { lines.withLock { $0.joined(separator: "\n") } }

    /// The handler writing here, for a test that wraps it in another.
    public struct Handler: LogHandler {
        let log: CapturedLog
        public var metadata: Logger.Metadata = [:]
        public var logLevel: Logger.Level = .trace

        public init(log: CapturedLog) { self.log = log }

        public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        public func log(event: LogEvent) {
            var merged = metadata
            merged.merge(event.metadata ?? [:]) { _, new in new }
            if let error = event.error { merged["error.message"] = "\(error)" }
            let fields = merged.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
            log.lines.withLock { $0.append("\(event.level) \(event.message) \(fields.joined(separator: " "))") }
        }
    }
}
