import Logging

/// Log text made safe to write: every outside value (a file's field, a peer's line, a reply's
/// text) reaches a log through it, so a newline in a `client_id` cannot forge a whole log line.
public enum LogText {
    /// `text` with each line break, control character and invisible line separator written as an
    /// escape: `\n`, `\r`, `\t`, else `\u{XX}` (C0 controls, DEL, C1 controls, U+2028, U+2029).
    /// Everything else, backslashes included, is kept.
    public static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: needsEscape) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard needsEscape(scalar) else {
                result.append(scalar)
                continue
            }
            let escape: String
            switch scalar {
            case "\n": escape = "\\n"
            case "\r": escape = "\\r"
            case "\t": escape = "\\t"
            default: escape = "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
            }
            result.append(contentsOf: escape.unicodeScalars)
        }
        return String(result)
    }

    /// `metadata` with every value (nested ones too) a string, escaped.
    public static func escaped(_ metadata: Logger.Metadata) -> Logger.Metadata {
        metadata.reduce(into: [:]) { result, entry in result[escaped(entry.key)] = escaped(entry.value) }
    }

    /// `value` with its text escaped; lists and dictionaries element by element.
    public static func escaped(_ value: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch value {
        case .string(let text): .string(escaped(text))
        case .stringConvertible(let convertible): .string(escaped(convertible.description))
        case .array(let values): .array(values.map { escaped($0) })
        case .dictionary(let values): .dictionary(escaped(values))
        }
    }

    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        let value = scalar.value
        return value < 0x20 || (value >= 0x7F && value <= 0x9F) || value == 0x2028 || value == 0x2029
    }
}

/// A log handler that escapes (``LogText``) the message, the metadata and the error of every
/// entry before `inner` writes it: the stderr handler, whose lines a newline in a value would
/// otherwise split.
public struct EscapingLogHandler<Inner: LogHandler>: LogHandler {
    private var inner: Inner
    /// Metadata attached to every entry (kept here, so it is escaped too).
    public var metadata: Logger.Metadata = [:]
    /// Metadata asked for at each entry (escaped too).
    public var metadataProvider: Logger.MetadataProvider?

    /// Wraps `inner`, taking over its metadata.
    public init(_ inner: Inner) {
        var inner = inner
        metadata = inner.metadata
        metadataProvider = inner.metadataProvider
        inner.metadata = [:]
        // Set only when there is one: a handler without provider support warns on any set.
        if inner.metadataProvider != nil { inner.metadataProvider = nil }
        self.inner = inner
    }

    /// The level `inner` logs at.
    public var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        var merged = metadataProvider?.get() ?? [:]
        merged.merge(metadata) { _, new in new }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        if let error = event.error {
            merged["error.message"] = "\(error)"
            merged["error.type"] = "\(String(reflecting: type(of: error)))"
            event.error = nil
        }
        event.message = "\(LogText.escaped(event.message.description))"
        event.metadata = merged.isEmpty ? nil : LogText.escaped(merged)
        inner.log(event: event)
    }
}
