import Logging
import Synchronization
import TokenAgent
import TokenWire

/// The access rules in force, swapped by a reload and checked on every request, with the count of
/// denied requests and a log line once per peer and kind.
public final class AccessControl: Sendable {
    private struct Denial: Hashable {
        var pid: Int32
        var uid: UInt32
        var kind: String
    }

    private let rules: Mutex<AccessRules>
    private let updates = Atomic<Int>(0)
    private let deniedRequests = Atomic<Int>(0)
    private let deniedByKind = Mutex<[String: Int]>([:])
    private let logged = Mutex<Set<Denial>>([])
    private let logger: Logger
    /// What to configure, while the agent waits for a configuration with something to serve.
    private let waiting = Mutex<String?>(nil)

    /// The text after which an `unavailable` error says what to configure, while the agent waits
    /// for a configuration (``waitingForConfiguration``): `ERR unavailable not configured: …`.
    public static let notConfiguredPrefix = "not configured: "

    /// At most this many peer-and-kind pairs are remembered as logged; then the memory starts over.
    static let loggedLimit = 10_000

    /// Creates the control with `rules` in force.
    public init(rules: AccessRules = .open(), logger: Logger = Logger(label: "fleet-tokend.access")) {
        self.rules = Mutex(rules)
        self.logger = logger
    }

    /// Puts `rules` in force; open connections meet them at their next request, and at the
    /// writing of every token reply still owed (see ``version``).
    public func update(_ rules: AccessRules) {
        self.rules.withLock { $0 = rules }
        updates.add(1, ordering: .releasing)
    }

    /// Raised by every ``update(_:)``: a reply checked under one version is checked again before
    /// it is written under another.
    public var version: Int { updates.load(ordering: .acquiring) }

    /// The rules in force.
    public var current: AccessRules { rules.withLock { $0 } }

    /// What to configure while the agent waits for a configuration with something to serve
    /// (`serve --wait-for-configuration`, started on one that serves nothing); `nil` once it
    /// serves. Every kind is then answered `ERR unavailable not configured: <this>` instead of
    /// `bad-kind`, and `PING` and systemd's `STATUS=` say it too.
    public var waitingForConfiguration: String? { waiting.withLock { $0 } }

    /// Starts (`reason`: what to configure) or ends (`nil`) the wait for a configuration.
    public func waitForConfiguration(_ reason: String?) {
        waiting.withLock { $0 = reason }
    }

    /// The error that answers a request while the agent waits for a configuration, if it does.
    public var notConfiguredError: WireError? {
        waitingForConfiguration.map { WireError(.unavailable, Self.notConfiguredPrefix + $0) }
    }

    /// Requests denied since start.
    public var denied: Int { deniedRequests.load(ordering: .relaxed) }

    /// Requests denied since start, by kind (`admin` for the operator verbs).
    public var deniedPerKind: [String: Int] { deniedByKind.withLock { $0 } }

    /// `nil` when `peer` may ask for `kind`, else the `denied` error (counted and logged), or
    /// `bad-kind` when the rules in force are for a configuration without `kind` (`unavailable`
    /// naming what to configure while the agent waits for a configuration).
    func check(_ peer: PeerCredentials?, kind: String) -> WireError? {
        var configured: [String]?
        let verdict = rules.withLock { rules -> AccessRules.Verdict in
            let verdict = rules.verdict(peer, kind: kind)
            if verdict == .notConfigured { configured = rules.kinds }
            return verdict
        }
        switch verdict {
        case .allowed: return nil
        case .denied:
            let what = AccessTokenKind.name(ofKind: kind).map { "access token \($0)" } ?? "kind \(kind)"
            return deny(peer, kind: kind, WireError(.denied, "not allowed to ask for \(what)"))
        case .notConfigured:
            if let waiting = notConfiguredError { return waiting }
            // Worded as the engine words it (an access token by its name).
            return EngineFailure.unknownKind(kind, configured: configured ?? []).wireError
        }
    }

    /// `nil` when `peer` may use the operator verb `verb`, else the `denied` error.
    func checkAdmin(_ peer: PeerCredentials?, verb: String) -> WireError? {
        if rules.withLock({ $0.allowsAdmin(peer) }) { return nil }
        return deny(peer, kind: "admin", WireError(.denied, "\(verb) is for the agent's admins"))
    }

    private func deny(_ peer: PeerCredentials?, kind: String, _ error: WireError) -> WireError {
        deniedRequests.add(1, ordering: .relaxed)
        deniedByKind.withLock { $0[kind, default: 0] += 1 }
        let denial = Denial(pid: peer?.pid ?? -1, uid: peer?.uid ?? UInt32.max, kind: kind)
        let first = logged.withLock { logged in
            if logged.count >= Self.loggedLimit { logged.removeAll() }
            return logged.insert(denial).inserted
        }
        if first {
            var metadata = PeerCredentials.logMetadata(peer)
            metadata["token_kind"] = "\(kind)"
            if let pid = peer?.visiblePID, let name = ProcFile.processName(pid: pid) {
                metadata["peer_process"] = "\(name)"
            }
            logger.warning("request denied", metadata: metadata)
        }
        return error
    }
}
