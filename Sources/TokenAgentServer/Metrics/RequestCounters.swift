import CoreMetrics
import TokenWire

/// The verb a request is counted under: the `verb` label of `fleet_tokend_requests_total`.
enum RequestVerb: Int, CaseIterable, Sendable {
    case get, refresh, drop, info, ping, stats, metrics, help, quit, shm, touch, warm
    /// A line that is no request of a known verb (unknown verb, empty, too long, timed out).
    case other

    /// The label value.
    var label: String {
        switch self {
        case .get: return "GET"
        case .refresh: return "REFRESH"
        case .drop: return "DROP"
        case .info: return "INFO"
        case .ping: return "PING"
        case .stats: return "STATS"
        case .metrics: return "METRICS"
        case .help: return "HELP"
        case .quit: return "QUIT"
        case .shm: return "SHM"
        case .touch: return "TOUCH"
        case .warm: return "WARM"
        case .other: return "other"
        }
    }

    /// The verb of a parsed request.
    init(_ request: WireRequest) {
        switch request {
        case .get: self = .get
        case .refresh: self = .refresh
        case .drop: self = .drop
        case .info: self = .info
        case .ping: self = .ping
        case .stats: self = .stats
        case .metrics: self = .metrics
        case .help: self = .help
        case .quit: self = .quit
        case .shm: self = .shm
        case .touch: self = .touch
        case .warm: self = .warm
        }
    }

    /// The verb of a line that failed to parse: its first field when that names a verb.
    init(failedLine line: some Collection<UInt8>) {
        let verb = line.prefix { $0 != 0x20 }.map { $0 >= 0x61 && $0 <= 0x7A ? $0 - 0x20 : $0 }
        let text = String(decoding: verb, as: UTF8.self)
        self = Self.allCases.first { $0 != .other && $0.label == text } ?? .other
    }
}

/// The result code a reply is counted under: `ok`, or the code of an `ERR` reply.
enum ReplyCode: Int, CaseIterable, Sendable {
    case ok, badRequest, badKind, badID, denied, unavailable, rejected, busy

    /// How many codes there are (a constant: `allCases` would build an array).
    static let count = 8

    /// The label value.
    var label: String {
        switch self {
        case .ok: return "ok"
        case .badRequest: return WireErrorCode.badRequest.rawValue
        case .badKind: return WireErrorCode.badKind.rawValue
        case .badID: return WireErrorCode.badID.rawValue
        case .denied: return WireErrorCode.denied.rawValue
        case .unavailable: return WireErrorCode.unavailable.rawValue
        case .rejected: return WireErrorCode.rejected.rawValue
        case .busy: return WireErrorCode.busy.rawValue
        }
    }

    /// The code of an error reply.
    init(_ code: WireErrorCode) {
        switch code {
        case .badRequest: self = .badRequest
        case .badKind: self = .badKind
        case .badID: self = .badID
        case .denied: self = .denied
        case .unavailable: self = .unavailable
        case .rejected: self = .rejected
        case .busy: self = .busy
        }
    }
}

extension RequestVerb {
    /// The codes a reply to this verb can have (the series made up front).
    var codes: [ReplyCode] {
        switch self {
        case .get, .refresh, .other: return ReplyCode.allCases
        // `unavailable` while the agent waits for a configuration (`not configured: …`).
        case .drop, .info: return [.ok, .badRequest, .badKind, .badID, .denied, .unavailable]
        case .ping: return [.ok, .badRequest, .unavailable]
        case .stats, .metrics: return [.ok, .badRequest, .denied]
        case .help, .quit: return [.ok, .badRequest]
        case .shm: return [.ok, .badRequest, .badKind, .denied, .unavailable, .busy]
        case .touch: return [.ok, .badRequest, .badKind, .badID]
        case .warm: return [.ok, .badRequest, .badKind, .badID, .denied, .unavailable]
        }
    }
}

/// `fleet_tokend_requests_total`: one swift-metrics counter per verb and each code its replies can
/// have, all made up front, so counting a reply is an array index and an atomic add (no labels
/// built, no allocation: the cached GET's path counts through this).
final class RequestCounters: Sendable {
    private let counters: [Counter?]
    /// The same counters, borrowed by ``count(_:_:)`` rather than retained (`counters` holds
    /// them as long as this lives).
    private let borrowed: [Unmanaged<Counter>?]

    init(factory: any MetricsFactory) {
        var counters: [Counter?] = []
        for verb in RequestVerb.allCases {
            let codes = verb.codes
            for code in ReplyCode.allCases {
                counters.append(
                    codes.contains(code)
                        ? Counter(
                            label: "fleet_tokend_requests_total",
                            dimensions: [("verb", verb.label), ("code", code.label)],
                            factory: factory
                        ) : nil
                )
            }
        }
        self.counters = counters
        self.borrowed = counters.map { $0.map { Unmanaged.passUnretained($0) } }
    }

    /// Counts one reply (a code the verb's replies cannot have is counted under `other`).
    @inline(__always)
    func count(_ verb: RequestVerb, _ code: ReplyCode) {
        let counter =
            borrowed[verb.rawValue &* ReplyCode.count &+ code.rawValue]
            ?? borrowed[RequestVerb.other.rawValue &* ReplyCode.count &+ code.rawValue]
        counter?._withUnsafeGuaranteedRef { $0.increment(by: 1) }
    }
}
