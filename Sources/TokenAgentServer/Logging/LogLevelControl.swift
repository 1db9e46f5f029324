import Logging
import Synchronization

/// The log level in force, shared by every log handler of the process, so a reload can change it
/// for loggers that already exist (swift-log fixes a handler's level when the logger is made).
public final class LogLevelControl: Sendable {
    private let level: Atomic<UInt8>

    /// Starts at `level`.
    public init(_ level: Logger.Level) {
        self.level = Atomic(Self.code(level))
    }

    /// The level in force.
    public var current: Logger.Level {
        Logger.Level.allCases[Int(level.load(ordering: .relaxed))]
    }

    /// Puts `level` in force for every handler made with ``handler(wrapping:)``.
    public func set(_ level: Logger.Level) { self.level.store(Self.code(level), ordering: .relaxed) }

    /// `handler`, with its level read from this control.
    public func handler(wrapping handler: some LogHandler) -> some LogHandler {
        ControlledLogHandler(inner: handler, control: self)
    }

    private static func code(_ level: Logger.Level) -> UInt8 {
        UInt8(Logger.Level.allCases.firstIndex(of: level) ?? 2)
    }
}

/// A log handler whose level is the ``LogLevelControl``'s, whatever is set on it.
private struct ControlledLogHandler<Inner: LogHandler>: LogHandler {
    var inner: Inner
    let control: LogLevelControl

    var logLevel: Logger.Level {
        get { control.current }
        set {}  // the control decides
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }

    func log(event: LogEvent) {
        inner.log(event: event)
    }
}
