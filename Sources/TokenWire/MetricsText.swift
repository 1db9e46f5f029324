/// The reply to `METRICS`: the agent's metrics in the Prometheus text exposition format (version
/// 0.0.4), then the line `# EOF`. It is the one reply of protocol v1 that spans several lines.
///
/// Framing: a reader reads the first line. If it starts with `ERR `, that line is the whole reply
/// (for example `ERR denied METRICS is for the agent's admins`). Otherwise it reads lines up to and
/// including the line that is exactly ``endLine``; the lines before it are the exposition. No
/// line of the exposition is `# EOF` (every comment line the agent writes starts with `# HELP ` or
/// `# TYPE `), and no reply of another verb starts with `#`, so the framing is exact when requests
/// are pipelined.
public enum MetricsText {
    /// The last line of a `METRICS` reply, without its LF.
    public static let endLine = "# EOF"

    /// One sample of an exposition: a metric name, its labels in the order written, and its value.
    public struct Sample: Sendable, Hashable {
        /// The metric name, with any `_bucket`, `_sum` or `_count` suffix as written.
        public var name: String
        /// The labels, in the order written.
        public var labels: [String: String]
        /// The value (`+Inf`, `-Inf` and `NaN` included).
        public var value: Double

        /// Creates a sample.
        public init(name: String, labels: [String: String], value: Double) {
            self.name = name
            self.labels = labels
            self.value = value
        }
    }

    /// Whether `line` (without its LF) ends a `METRICS` reply.
    public static func isEnd(_ line: some StringProtocol) -> Bool {
        line == endLine || line == endLine + "\r"
    }

    /// The samples of an exposition's lines, comments and blank lines skipped; a line that is not
    /// a sample is skipped too. A reader for tools (`fleet-tokend status`), not a full validator.
    public static func samples(_ lines: some Sequence<some StringProtocol>) -> [Sample] {
        lines.compactMap { sample(String($0)) }
    }

    /// The sample on one line, if it is one: `name{label="value",...} value [timestamp]`.
    public static func sample(_ line: String) -> Sample? {
        let scalars = Array(line.unicodeScalars)
        guard let first = scalars.first, first != "#" else { return nil }
        var index = 0
        var name = ""
        while index < scalars.count, scalars[index] != "{", scalars[index] != " " {
            name.unicodeScalars.append(scalars[index])
            index += 1
        }
        guard !name.isEmpty, index < scalars.count else { return nil }
        var labels: [String: String] = [:]
        if scalars[index] == "{" {
            index += 1
            while index < scalars.count, scalars[index] != "}" {
                var label = ""
                while index < scalars.count, scalars[index] != "=" {
                    if scalars[index] != "," && scalars[index] != " " { label.unicodeScalars.append(scalars[index]) }
                    index += 1
                }
                index += 1
                guard index < scalars.count, scalars[index] == "\"" else { return nil }
                index += 1
                var value = ""
                while index < scalars.count, scalars[index] != "\"" {
                    if scalars[index] == "\\", index + 1 < scalars.count {
                        index += 1
                        value.unicodeScalars.append(scalars[index] == "n" ? "\n" : scalars[index])
                    } else {
                        value.unicodeScalars.append(scalars[index])
                    }
                    index += 1
                }
                guard index < scalars.count else { return nil }
                index += 1
                labels[label] = value
                while index < scalars.count, scalars[index] == "," || scalars[index] == " " { index += 1 }
            }
            guard index < scalars.count else { return nil }
            index += 1
        }
        let rest = String(String.UnicodeScalarView(scalars[index...])).split(separator: " ")
        guard let text = rest.first else { return nil }
        let value: Double
        switch text {
        case "+Inf": value = .infinity
        case "-Inf": value = -.infinity
        case "NaN": value = .nan
        default:
            guard let parsed = Double(text) else { return nil }
            value = parsed
        }
        return Sample(name: name, labels: labels, value: value)
    }
}
