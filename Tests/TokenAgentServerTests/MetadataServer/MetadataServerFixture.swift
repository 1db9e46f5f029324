import Logging
import MetadataEndpoint
import NIOCore
import Synchronization
import TestSupport
import Testing
import TokenAgentServer

#if canImport(Glibc)
    import Glibc
#endif

/// A token source with fixed entries that counts its calls.
final class CountingTokenSource: MetadataTokenSource {
    let entries: [MetadataEntry]
    private let state = Mutex<(calls: Int, failing: Bool, delay: Duration)>((0, false, .zero))

    init(entries: [MetadataEntry]) { self.entries = entries }

    /// How many tokens were asked for.
    var calls: Int { state.withLock { $0.calls } }

    /// Makes later calls fail.
    func setFailing(_ failing: Bool) { state.withLock { $0.failing = failing } }

    /// Makes later calls take `delay`, as a fetch at IAM does.
    func setDelay(_ delay: Duration) { state.withLock { $0.delay = delay } }

    struct Failure: Error {}

    func token(for entry: MetadataEntry) async throws -> MetadataToken {
        let (failing, delay) = state.withLock { state in
            state.calls += 1
            return (state.failing, state.delay)
        }
        if delay > .zero { try await Task.sleep(for: delay) }
        if failing { throw Failure() }
        return MetadataToken(
            accessToken: MetadataServerFixture.token(of: entry.name),
            expiresAt: MetadataRouter.wallClock() + 3000
        )
    }
}

/// What the endpoint's tests serve: `fleet-admin` (the default) to this process's uid;
/// `nobody-only` to uid 65534; `nogroup` to gid 65534's members.
enum MetadataServerFixture {
    static let cloudPlatform = "https://www.googleapis.com/auth/cloud-platform"
    static let adminAccount = "fleet-admin@fleet-test.iam.gserviceaccount.com"
    static let nobodyAccount = "nobody-only@fleet-test.iam.gserviceaccount.com"
    static let groupAccount = "nogroup@fleet-test.iam.gserviceaccount.com"

    static func token(of name: String) -> String { "ya29.fake-\(name)-token" }

    static var entries: [MetadataEntry] {
        [
            MetadataEntry(
                name: "fleet-admin",
                account: adminAccount,
                scopes: [cloudPlatform],
                allowedUIDs: [getuid()],
                allowedGIDs: []
            ),
            MetadataEntry(
                name: "nobody-only",
                account: nobodyAccount,
                scopes: [cloudPlatform],
                allowedUIDs: [65534],
                allowedGIDs: []
            ),
            MetadataEntry(
                name: "nogroup",
                account: groupAccount,
                scopes: [cloudPlatform],
                allowedUIDs: [],
                allowedGIDs: [65534]
            ),
        ]
    }

    /// Limits small enough for a test to wait them out.
    /// The time-outs are hang detectors here (``hangLimit``): in a loaded parallel run a client's
    /// next request can come seconds after the answer before it. The tests of the time-outs set
    /// their own (``shortHeadTimeout``).
    static var testLimits: MetadataHTTPServer.Limits {
        var limits = MetadataHTTPServer.Limits()
        limits.headTimeout = .seconds(Int64(hangLimit))
        limits.idleTimeout = .seconds(Int64(hangLimit))
        return limits
    }

    /// Limits whose head time-out a test waits out: 1 s.
    static var shortHeadTimeout: MetadataHTTPServer.Limits {
        var limits = testLimits
        limits.headTimeout = .seconds(1)
        return limits
    }

    /// Runs `body` against an endpoint on `host`:0 serving `tokens`, then stops it; returns the
    /// endpoint's log.
    @discardableResult
    static func withServer(
        host: String = "127.0.0.1",
        tokens: CountingTokenSource = CountingTokenSource(entries: entries),
        limits: MetadataHTTPServer.Limits = testLimits,
        _ body: (MetadataListenAddress, CountingTokenSource) async throws -> Void
    ) async throws -> [String] {
        try await withCountedServer(host: host, tokens: tokens, limits: limits) { address, tokens, _ in
            try await body(address, tokens)
        }
    }

    /// ``withServer(host:tokens:limits:_:)`` with the peers `resolver` names, giving `body` the
    /// endpoint's counts too.
    @discardableResult
    static func withCountedServer(
        host: String = "127.0.0.1",
        tokens: CountingTokenSource = CountingTokenSource(entries: entries),
        resolver: any MetadataPeerResolver = KernelPeerResolver(),
        limits: MetadataHTTPServer.Limits = testLimits,
        _ body: (MetadataListenAddress, CountingTokenSource, MetadataStatistics) async throws -> Void
    ) async throws -> [String] {
        let log = CapturedLog()
        let logger = log.logger(label: "metadata-test")
        let server = MetadataHTTPServer(
            configuration: MetadataServerConfiguration(
                listen: try MetadataListenAddress(host: host, port: 0),
                defaultEntry: "fleet-admin"
            ),
            tokens: tokens,
            resolver: resolver,
            logger: logger,
            limits: limits
        )
        let running = Task { try await server.run() }
        do {
            let address = try await server.listeningAddress()
            try await body(address, tokens, server.statistics)
        } catch {
            running.cancel()
            _ = await running.result
            throw error
        }
        running.cancel()
        try await running.value
        return log.lines.withLock { $0 }
    }
}

/// An HTTP answer as curl printed it (`-i`).
struct CurlAnswer {
    var status: Int
    var headers: [(name: String, value: String)]
    var body: String
    var standardError: String

    func value(of name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// Runs curl (`-sS -i`) with `arguments`, as uid and gid 65534 with `asNobody`; the answer it
/// printed.
func curl(_ arguments: [String], asNobody: Bool = false) async throws -> CurlAnswer {
    let privileges = asNobody ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : []
    let outcome = try await TestProcess.run(
        privileges + ["curl", "-sS", "-i", "--max-time", "\(Int(hangLimit))", "--noproxy", "*"] + arguments,
        timeout: hangLimit
    )
    try #require(outcome.status == 0, "curl failed: \(outcome.standardError)")
    return try parseAnswer(outcome.standardOutput, standardError: outcome.standardError)
}

/// Parses one HTTP answer (`HTTP/1.1 200 OK\r\nfields\r\n\r\nbody`).
func parseAnswer(_ text: String, standardError: String = "") throws -> CurlAnswer {
    let parts = text.split(separator: "\r\n\r\n", maxSplits: 1, omittingEmptySubsequences: false)
    let lines = parts[0].split(separator: "\r\n")
    let statusLine = lines.first.map(String.init) ?? ""
    let statusWords = statusLine.split(separator: " ")
    let status = try #require(statusWords.count >= 2 ? Int(statusWords[1]) : nil, "no status line in \(text)")
    var headers: [(name: String, value: String)] = []
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers.append((String(line[..<colon]), String(line[line.index(after: colon)...].drop { $0 == " " })))
    }
    return CurlAnswer(
        status: status,
        headers: headers,
        body: parts.count > 1 ? String(parts[1]) : "",
        standardError: standardError
    )
}
