import CSystemd
import Logging

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A swift-log handler that writes structured entries to the journal with `sd_journal_sendv`:
/// `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`, and every metadata key as an upper-case field
/// (`token_kind` becomes `TOKEN_KIND`). Use it when ``stderrIsJournal`` says stderr goes to
/// the journal anyway. The message and every value are escaped (``LogText``): the journal keeps
/// a newline in a field, and `journalctl` would show it as a line of its own.
public struct JournalLogHandler: LogHandler {
    /// The log level.
    public var logLevel: Logger.Level = .info
    /// Metadata attached to every entry.
    public var metadata: Logger.Metadata = [:]
    private let label: String
    private let identifier: String

    /// Creates a handler for `label`, entries tagged with `identifier`.
    public init(label: String, identifier: String = "fleet-tokend") {
        self.label = label
        self.identifier = identifier
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Whether stderr is connected to the journal: `$JOURNAL_STREAM` names stderr's device and
    /// inode.
    public static var stderrIsJournal: Bool {
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// The journal fields for an entry, in order (exposed for tests).
    public static func fields(
        message: String,
        level: Logger.Level,
        identifier: String,
        label: String,
        metadata: Logger.Metadata
    ) -> [String] {
        var fields = [
            "MESSAGE=\(LogText.escaped(message))",
            "PRIORITY=\(priority(level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "LOGGER=\(label)",
        ]
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            let name = fieldName(key)
            guard !name.isEmpty else { continue }
            fields.append("\(name)=\(LogText.escaped(value).description)")
        }
        return fields
    }

    /// A journal field name for a metadata key: upper case, only `A-Z 0-9 _`, not starting with
    /// `_` or a digit.
    public static func fieldName(_ key: String) -> String {
        var name = String(
            key.uppercased().unicodeScalars.map { scalar -> Character in
                let value = scalar.value
                let allowed = (value >= 0x41 && value <= 0x5A) || (value >= 0x30 && value <= 0x39)
                return allowed ? Character(scalar) : "_"
            }
        )
        while name.first == "_" || name.first?.isNumber == true { name.removeFirst() }
        return String(name.prefix(64))
    }

    /// The syslog priority of a level.
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        let fields = Self.fields(
            message: event.message.description,
            level: event.level,
            identifier: identifier,
            label: label,
            metadata: merged
        )
        var buffer: [UInt8] = []
        var ranges: [(offset: Int, count: Int)] = []
        for field in fields {
            ranges.append((buffer.count, field.utf8.count))
            buffer += field.utf8
        }
        buffer.withUnsafeMutableBytes { raw in
            var vectors = ranges.map { iovec(iov_base: raw.baseAddress! + $0.offset, iov_len: $0.count) }
            _ = sd_journal_sendv(&vectors, Int32(vectors.count))
        }
    }
}
