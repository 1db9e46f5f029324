import Foundation
import Synchronization
import TestSupport
import Testing
import TokenAgent

/// A clock the test moves by hand.
final class ManualClock: AgentClock, Sendable {
    private let now: Mutex<(mono: Double, wall: Double)>

    init(mono: Double = 1000, wall: Double = 1_800_000_000) {
        now = Mutex((mono, wall))
    }

    var monotonicSeconds: Double { now.withLock { $0.mono } }
    var wallSeconds: Double { now.withLock { $0.wall } }

    func advance(_ seconds: Double) {
        now.withLock {
            $0.mono += seconds
            $0.wall += seconds
        }
    }

    /// Steps the wall clock alone (NTP correcting it, say), forward for a positive `seconds`.
    func stepWall(_ seconds: Double) {
        now.withLock { $0.wall += seconds }
    }
}

/// A provider whose answers the test scripts: mints `tok-<id>-<n>` tokens of a given lifetime,
/// or fails, and can hold every fetch until released.
final class ScriptedProvider: TokenProvider, Sendable {
    enum Mode: Sendable {
        case succeed(lifetime: Double)
        case fail(ProviderError)
        case expiresAt(Double)
    }

    private struct State {
        var mode: Mode = .succeed(lifetime: 3600)
        var fetches = 0
        var shutdowns = 0
        /// Fetches entered and not yet returned.
        var running = 0
        /// `running` at each shutdown.
        var runningAtShutdowns: [Int] = []
    }

    private let state = Mutex(State())
    private let held = HeldWork()
    private let clock: ManualClock
    private let prefix: String

    /// A provider minting `<prefix>-<id>-<n>` tokens.
    init(clock: ManualClock, prefix: String = "tok") {
        self.clock = clock
        self.prefix = prefix
    }

    var summary: String { "scripted" }
    var fetches: Int { state.withLock { $0.fetches } }
    var shutdowns: Int { state.withLock { $0.shutdowns } }

    /// How many fetches were still running at each shutdown.
    var runningAtShutdowns: [Int] { state.withLock { $0.runningAtShutdowns } }

    func shutdown() async {
        state.withLock { state in
            state.shutdowns += 1
            state.runningAtShutdowns.append(state.running)
        }
    }
    var heldCount: Int { held.count }

    func setMode(_ mode: Mode) { state.withLock { $0.mode = mode } }
    func hold() { held.hold() }
    func release() { held.release() }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        let (mode, count) = state.withLock { state in
            state.fetches += 1
            state.running += 1
            return (state.mode, state.fetches)
        }
        defer { state.withLock { $0.running -= 1 } }
        await held.pass()
        switch mode {
        case .succeed(let lifetime):
            return FetchedToken(
                token: "\(prefix)-\(key.id)-\(count)",
                expiresAtUnixSeconds: clock.wallSeconds + lifetime
            )
        case .fail(let error):
            throw error
        case .expiresAt(let wall):
            return FetchedToken(token: "\(prefix)-\(key.id)-\(count)", expiresAtUnixSeconds: wall)
        }
    }
}

/// Makes an unsigned JWT-shaped token with the given claims (the agent never checks signatures).
func makeJWT(_ claims: [String: Any]) -> String {
    let header = try! JSONSerialization.data(withJSONObject: ["alg": "RS256", "typ": "JWT"])
    let payload = try! JSONSerialization.data(withJSONObject: claims)
    return JWTClaims.base64URLEncode(header) + "." + JWTClaims.base64URLEncode(payload) + ".c2ln"
}

/// A JWT-shaped token whose payload is exactly `payload`, for what `makeJWT` cannot write (`1e400`,
/// duplicate keys, a lone surrogate).
func makeRawJWT(payload: String, header: String = #"{"alg":"RS256"}"#, signature: String = "c2ln") -> String {
    JWTClaims.base64URLEncode(Array(header.utf8)) + "." + JWTClaims.base64URLEncode(Array(payload.utf8)) + "."
        + signature
}

/// `json` read as a config file over the defaults.
func parseConfiguration(_ json: String) throws -> AgentConfiguration {
    try ConfigurationFile.parse(Data(json.utf8), over: AgentConfiguration())
}

/// The first problem of `json` as a config file: parsed, validated, and its rules' kinds checked
/// (as at start-up); `nil` when it has none.
func configurationProblem(_ json: String, sourceLocation: SourceLocation = #_sourceLocation) -> ConfigurationError? {
    do {
        let configuration = try parseConfiguration(json)
        try configuration.validate()
        try configuration.checkAccessKinds()
        return nil
    } catch let error as ConfigurationError {
        return error
    } catch {
        Issue.record("not a ConfigurationError: \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

extension TokenEngine {
    /// REFRESH as a socket connection takes it: ``TokenEngine/lookupRefresh(kind:id:refusedToken:requester:)``,
    /// then its wait awaited when the answer is not at hand.
    func awaitRefresh(kind: String, id: String, refusedToken: String? = nil) async -> Outcome {
        switch lookupRefresh(kind: kind, id: id, refusedToken: refusedToken) {
        case .ready(let outcome): return outcome
        case .pending(let wait): return await wait()
        }
    }
}
