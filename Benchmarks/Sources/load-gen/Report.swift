import Histogram

/// The figures of one run: throughput over the measured window and latency percentiles in µs.
struct Report {
    let options: Options
    let tally: Tally
    let seconds: Double

    private var count: Int { options.isCounted ? tally.replies : tally.measured }
    private var rate: Double { seconds > 0 ? Double(count) / seconds : 0 }

    private func micros(_ percentile: Double) -> Double {
        tally.histogram.totalCount == 0 ? 0 : Double(tally.histogram.valueAtPercentile(percentile)) / 1000
    }

    private func fixed(_ value: Double, _ digits: Int) -> String {
        // Without Foundation: round half up to `digits` decimals.
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = (value * scale).rounded()
        let whole = Int(scaled / scale)
        let fraction = Int(scaled) - whole * Int(scale)
        if digits == 0 { return String(whole) }
        let digitsText = String(fraction)
        return "\(whole)." + String(repeating: "0", count: digits - digitsText.count) + digitsText
    }

    private var mode: String {
        if options.requests > 0 { return "count" }
        if !options.warm { return "get" }
        return options.setBytes > 0 ? "set" : "warm"
    }

    var json: String {
        let fields: [(String, String)] = [
            ("label", "\"\(options.label)\""),
            ("protocol", "\"\(options.wire.rawValue)\""),
            ("mode", "\"\(mode)\""),
            ("connections", String(options.connections)),
            ("depth", String(options.depth)),
            ("keys", String(options.keys)),
            ("threads", String(options.threads)),
            ("seconds", fixed(seconds, 3)),
            ("requests", String(count)),
            ("req_per_s", fixed(rate, 0)),
            ("p50_us", fixed(micros(50), 1)),
            ("p99_us", fixed(micros(99), 1)),
            ("p999_us", fixed(micros(99.9), 1)),
            ("max_us", fixed(Double(tally.histogram.max) / 1000, 1)),
            ("errors", String(tally.errors)),
            ("broken_connections", String(tally.brokenConnections)),
        ]
        return "{" + fields.map { "\"\($0.0)\": \($0.1)" }.joined(separator: ", ") + "}"
    }

    var text: String {
        let name = options.label.isEmpty ? "" : options.label + ": "
        return "\(name)\(options.wire.rawValue) \(mode) connections=\(options.connections) depth=\(options.depth) "
            + "keys=\(options.keys): \(count) requests in \(fixed(seconds, 2)) s, \(fixed(rate, 0)) req/s, "
            + "p50 \(fixed(micros(50), 1)) µs, p99 \(fixed(micros(99), 1)) µs, p99.9 \(fixed(micros(99.9), 1)) µs, "
            + "max \(fixed(Double(tally.histogram.max) / 1000, 1)) µs, errors \(tally.errors)"
            + (tally.brokenConnections > 0 ? ", broken connections \(tally.brokenConnections)" : "")
    }
}
