import TokenWire

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// What `fleet-tokend status` shows, built from one `PING`, `STATS` and `METRICS` exchange. It
/// holds counts, kinds, reasons and times only: the agent's replies to these verbs never carry a
/// token or an id.
struct StatusReport {
    /// One kind's line.
    struct Kind {
        var name: String
        var entries = 0
        var failingSeconds = 0.0
        var lastFailureReason: String?
        var lastFailureAt: Double?
        var fetchErrors = 0
        var soonestExpiry: Double?
        var degradedReasons: [String] = []
    }

    var degraded = false
    /// What to configure, when the agent waits for a configuration with something to serve
    /// (`serve --wait-for-configuration`: `PING` answers `ERR unavailable not configured: …`).
    var waitingForConfiguration: String?
    /// The agent runs its demo issuer (`demo=1` in STATS).
    var demo = false
    /// The agent's version (`version=` in STATS); `nil` from an agent that does not say.
    var version: String?
    /// The host's credentials in force (`host_identity=` in STATS, decoded): e.g.
    /// `external_account (aws) via pool/provider, impersonating a@b`; `nil` when nothing uses
    /// them or the agent does not say.
    var hostIdentity: String?
    var refresherStalled = false
    var uptime = 0
    var entries = 0
    var hits = 0
    var misses = 0
    var fetchErrors = 0
    var denied = 0
    /// Open connections other than this report's own.
    var connections = 0
    var reloads = 0
    var reloadFailures = 0
    var lastReloadApplied = true
    var refresherAge = 0.0
    var kinds: [Kind] = []
    /// The cache file's state, when the agent has one (`snapshot_file` in STATS).
    var cacheFile: CacheFileState?

    /// The cache file (`cache_file`): where it is, its last write, and what the start took from
    /// it, from STATS' `snapshot_*` fields.
    struct CacheFileState {
        var path: String
        /// Unix time of the last write, `nil` before the first.
        var writtenAt: Int?
        var bytes = 0
        var tokens = 0
        var writeMilliseconds = 0
        var writes = 0
        var writeFailures = 0
        /// Where the start's tokens came from: `file`, `fd_store` (systemd's, which wins), or
        /// `nil` when nothing was read (no file yet).
        var adoptedFrom: String?
        var adopted = 0
        var skipped = 0
    }

    /// The report of a `PING` reply, `STATS` fields and `METRICS` samples.
    init(ping: String, stats: [String: String], samples: [MetricsText.Sample]) {
        func stat(_ name: String) -> Int { Int(stats[name] ?? "") ?? 0 }
        if case .error(let error) = WireReply.parse(Substring(ping)), error.code == .unavailable,
            error.message.hasPrefix(Self.notConfiguredPrefix)
        {
            waitingForConfiguration = String(error.message.dropFirst(Self.notConfiguredPrefix.count))
        }
        refresherStalled = ping != "PONG" && waitingForConfiguration == nil
        uptime = stat("uptime_s")
        demo = stat("demo") == 1
        version = stats["version"]
        hostIdentity = stats["host_identity"].flatMap { $0 == StatsWord.none ? nil : StatsText.decode($0) }
        entries = stat("entries")
        hits = stat("hits")
        misses = stat("misses")
        fetchErrors = stat("fetch_errors")
        denied = stat("denied")
        // STATS counts the connection it is asked on: status's own, which is no client.
        connections = max(0, stat("connections") - 1)
        reloads = stat("reloads")
        reloadFailures = stat("reload_failures")
        if let path = stats["snapshot_file"].flatMap(StatsWord.decode) {
            let writtenAt = stat("snapshot_written_at")
            cacheFile = CacheFileState(
                path: path,
                writtenAt: writtenAt > 0 ? writtenAt : nil,
                bytes: stat("snapshot_bytes"),
                tokens: stat("snapshot_tokens"),
                writeMilliseconds: stat("snapshot_write_ms"),
                writes: stat("snapshot_writes"),
                writeFailures: stat("snapshot_write_failures"),
                adoptedFrom: stats["snapshot_source"].flatMap(StatsWord.decode),
                adopted: stat("snapshot_adopted"),
                skipped: stat("snapshot_skipped")
            )
        }
        var byKind: [String: Kind] = [:]
        func update(_ name: String?, _ body: (inout Kind) -> Void) {
            guard let name else { return }
            var kind = byKind[name] ?? Kind(name: name)
            body(&kind)
            byKind[name] = kind
        }
        var healthy = true
        for sample in samples {
            let kind = sample.labels["kind"]
            switch sample.name {
            case "fleet_tokend_healthy": healthy = sample.value == 1
            case "fleet_tokend_last_reload_success": lastReloadApplied = sample.value == 1
            case "fleet_tokend_refresher_last_pass_age_seconds": refresherAge = sample.value
            case "fleet_tokend_entries": update(kind) { $0.entries = Int(saturating: sample.value) }
            case "fleet_tokend_provider_failing_seconds": update(kind) { $0.failingSeconds = sample.value }
            case "fleet_tokend_soonest_expiry_seconds": update(kind) { $0.soonestExpiry = sample.value }
            case "fleet_tokend_fetch_errors_total":
                update(kind) {
                    $0.fetchErrors =
                        $0.fetchErrors.addingReportingOverflow(Int(saturating: sample.value)).overflow
                        ? .max : $0.fetchErrors + Int(saturating: sample.value)
                }
            case "fleet_tokend_provider_last_failure_timestamp_seconds":
                update(kind) { entry in
                    if sample.value > (entry.lastFailureAt ?? -1) {
                        entry.lastFailureAt = sample.value
                        entry.lastFailureReason = sample.labels["reason"]
                    }
                }
            case "fleet_tokend_degraded" where sample.value == 1:
                update(kind) { $0.degradedReasons.append(sample.labels["reason"] ?? "?") }
            default: break
            }
        }
        kinds = byKind.values.sorted { $0.name < $1.name }
        degraded = !healthy || refresherStalled || waitingForConfiguration != nil
    }

    /// What `PING`'s error says, before what to configure, while the agent waits for a
    /// configuration (AccessControl.notConfiguredPrefix).
    static let notConfiguredPrefix = "not configured: "

    /// `serving`, `degraded`, or `unconfigured` while the agent waits for a configuration.
    var state: String {
        waitingForConfiguration != nil ? "unconfigured" : degraded ? "degraded" : "serving"
    }

    /// The hit ratio in percent, `nil` before the first GET.
    var hitRatio: Double? {
        let total = Double(hits) + Double(misses)
        return total == 0 ? nil : Double(hits) * 100 / total
    }

    /// The kind with the soonest expiry among tokens in use, and that expiry.
    var soonest: (kind: String, seconds: Double)? {
        kinds.compactMap { kind in kind.soonestExpiry.map { (kind.name, $0) } }.min { $0.1 < $1.1 }
    }

    /// Why the agent is degraded, one phrase per problem.
    var problems: [String] {
        var problems: [String] = []
        if let waitingForConfiguration { problems.append(waitingForConfiguration) }
        if refresherStalled { problems.append("refresher stalled (last pass \(Int(saturating: refresherAge)) s ago)") }
        for kind in kinds {
            for reason in kind.degradedReasons {
                switch reason {
                case "provider_failing":
                    var text = "\(kind.name): provider failing for \(Int(saturating: kind.failingSeconds)) s"
                    if let last = kind.lastFailureReason { text += " (last error: \(last))" }
                    problems.append(text)
                case "misconfigured":
                    var text = "\(kind.name): signer or credentials need the operator"
                    if let last = kind.lastFailureReason { text += " (last error: \(last))" }
                    problems.append(text)
                case "expiry_soon":
                    let soon = kind.soonestExpiry.map { " (soonest in \(Int(saturating: $0)) s)" } ?? ""
                    problems.append("\(kind.name): tokens in use close to expiry\(soon)")
                default: problems.append("\(kind.name): \(reason)")
                }
            }
        }
        if degraded && problems.isEmpty { problems.append("degraded") }
        return problems
    }

    /// The report for a terminal, coloured when `colour` is set. Every text that came from the
    /// agent (kinds, reasons) is escaped (``TerminalText``).
    func text(colour: Bool, now: Double) -> String {
        let escaped = TerminalText.escaped
        func paint(_ text: String, _ code: String) -> String { colour ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text }
        var lines: [String] = []
        let state =
            waitingForConfiguration != nil
            ? paint("waiting for configuration", "1;33")
            : degraded ? paint("degraded", "1;31") : paint("serving", "1;32")
        lines.append("fleet-tokend: \(state), up \(Self.duration(uptime))")
        for problem in problems { lines.append("  " + paint("! " + escaped(problem), "31")) }
        if demo {
            lines.append(
                "demo:      " + paint("the demo issuer runs: Fleet Engine refuses its tokens", "1;33")
                    + " (configure a provider or an issuer, docs/CONFIG.md)"
            )
        }
        let ratio = hitRatio.map { DecimalText.fixed($0, digits: 1) + "%" } ?? "n/a"
        lines.append(
            "cache:     \(Self.count(entries, "entry", "entries")), hit ratio \(ratio) "
                + "(\(Self.count(hits, "hit", "hits")), \(Self.count(misses, "miss", "misses")))"
        )
        if let soonest {
            lines.append(
                "expiry:    soonest token in use expires in \(Self.duration(Int(saturating: soonest.seconds))) (\(escaped(soonest.kind)))"
            )
        } else {
            lines.append("expiry:    no token read within the idle time-out")
        }
        let identity = hostIdentity.map(escaped) ?? "none (no key-less issuer, host access token or metadata endpoint)"
        lines.append("host identity: \(identity)")
        if let cacheFile { lines.append(Self.cacheFileLine(cacheFile, now: now, paint: paint)) }
        lines.append("providers:")
        for kind in kinds {
            var text = "  \(TerminalText.padded(escaped(kind.name), to: 18))"
            text +=
                kind.failingSeconds > 0
                ? paint("failing \(Int(saturating: kind.failingSeconds)) s", "31") : paint("ok", "32")
            text +=
                ", \(Self.count(kind.entries, "entry", "entries")), "
                + Self.count(kind.fetchErrors, "fetch error", "fetch errors")
            if let at = kind.lastFailureAt, let reason = kind.lastFailureReason {
                text += ", last error \(escaped(reason)) \(Self.duration(Int(saturating: max(0, now - at)))) ago"
            }
            lines.append(text)
        }
        lines.append(
            "clients:   \(connections) connected besides this check, \(Self.count(denied, "request", "requests")) denied"
        )
        var reload = "reloads:   \(reloads) applied, \(reloadFailures) refused"
        if reloads + reloadFailures > 0 {
            reload += lastReloadApplied ? ", last applied" : ", " + paint("last refused", "31")
        }
        lines.append(reload)
        if let version { lines.append("version:   \(escaped(version))") }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The report as JSON for scripts: one line, keys sorted.
    func json(now: Double) -> String {
        var kindObjects: [JSONValue] = []
        for kind in kinds {
            var object: [String: JSONValue] = [
                "kind": .string(kind.name), "entries": .int(kind.entries),
                "provider_failing_s": .int(Int(saturating: kind.failingSeconds)),
                "fetch_errors": .int(kind.fetchErrors), "degraded_reasons": .strings(kind.degradedReasons),
            ]
            if let soonest = kind.soonestExpiry { object["soonest_expiry_s"] = .int(Int(saturating: soonest)) }
            if let at = kind.lastFailureAt, let reason = kind.lastFailureReason {
                object["last_error"] = .string(reason)
                object["last_error_at"] = .int(Int(saturating: at))
            }
            kindObjects.append(.object(object))
        }
        var object: [String: JSONValue] = [
            "state": .string(state),
            "demo": .bool(demo),
            "version": .string(version ?? ""),
            "host_identity": .string(hostIdentity ?? ""),
            "problems": .strings(problems.filter { _ in degraded }),
            "uptime_s": .int(uptime),
            "entries": .int(entries),
            "hits": .int(hits),
            "misses": .int(misses),
            "fetch_errors": .int(fetchErrors),
            "denied": .int(denied),
            "connections": .int(connections),
            "reloads": .int(reloads),
            "reload_failures": .int(reloadFailures),
            "last_reload_applied": .bool(lastReloadApplied),
            "refresher_stalled": .bool(refresherStalled),
            "kinds": .array(kindObjects),
        ]
        if let file = cacheFile {
            var fields: [String: JSONValue] = [
                "path": .string(file.path), "bytes": .int(file.bytes), "tokens": .int(file.tokens),
                "write_ms": .int(file.writeMilliseconds), "writes": .int(file.writes),
                "write_failures": .int(file.writeFailures), "adopted": .int(file.adopted),
                "skipped": .int(file.skipped),
            ]
            if let at = file.writtenAt { fields["written_at"] = .int(at) }
            if let source = file.adoptedFrom { fields["adopted_from"] = .string(source) }
            object["cache_file"] = .object(fields)
        }
        if let ratio = hitRatio { object["hit_ratio"] = .double((ratio * 10).rounded() / 1000) }
        if let soonest {
            object["soonest_expiry_s"] = .int(Int(saturating: soonest.seconds))
            object["soonest_expiry_kind"] = .string(soonest.kind)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let data = (try? encoder.encode(JSONValue.object(object))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// The cache file's line: where, the last write (its age, tokens, size and duration), failed
    /// writes, and what the start took over.
    static func cacheFileLine(_ file: CacheFileState, now: Double, paint: (String, String) -> String) -> String {
        let escaped = TerminalText.escaped
        var text = "cache file: \(escaped(file.path)), "
        if let at = file.writtenAt {
            text +=
                "written \(duration(Int(saturating: max(0, now - Double(at))))) ago "
                + "(\(count(file.tokens, "token", "tokens")), \(size(file.bytes)), in \(file.writeMilliseconds) ms)"
        } else {
            text += "not written yet"
        }
        if file.writeFailures > 0 {
            text += ", " + paint(count(file.writeFailures, "write failed", "writes failed"), "31")
        }
        switch file.adoptedFrom {
        case "file": text += "; adopted at start: \(file.adopted)"
        case "fd_store": text += "; adopted at start from systemd's fd store: \(file.adopted)"
        case let other?: text += "; adopted at start from \(escaped(other)): \(file.adopted)"
        case nil: text += "; nothing adopted at start"
        }
        if file.adoptedFrom != nil, file.skipped > 0 { text += " (\(file.skipped) skipped)" }
        return text
    }

    /// `512 bytes`, `4.0 KiB`, `70.4 MiB` or `1.2 GiB`.
    static func size(_ bytes: Int) -> String {
        let units: [(String, Double)] = [("GiB", 1_073_741_824), ("MiB", 1_048_576), ("KiB", 1024)]
        for (name, unit) in units where Double(bytes) >= unit {
            return DecimalText.fixed(Double(bytes) / unit, digits: 1) + " " + name
        }
        return count(bytes, "byte", "bytes")
    }

    /// `3 d 4 h`, `2 h 5 min`, `4 min 10 s` or `12 s`.
    static func duration(_ seconds: Int) -> String {
        switch seconds {
        case 86_400...: return "\(seconds / 86_400) d \(seconds % 86_400 / 3600) h"
        case 3600...: return "\(seconds / 3600) h \(seconds % 3600 / 60) min"
        case 60...: return "\(seconds / 60) min \(seconds % 60) s"
        default: return "\(seconds) s"
        }
    }

    /// `count` and its noun, singular for one: `1 entry`, `2 entries`, `0 entries`.
    static func count(_ count: Int, _ singular: String, _ plural: String) -> String {
        "\(count) \(count == 1 ? singular : plural)"
    }

}

/// A value of `status --json`.
private enum JSONValue: Encodable {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case array([JSONValue])
    case object([String: JSONValue])

    static func strings(_ texts: [String]) -> JSONValue { .array(texts.map(JSONValue.string)) }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .int(let value): try container.encode(value)
        case .double(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
