import FleetTokenClient
import Foundation

/// `token-bench access`: reads of one access token, each timed, by the ways a worker can get it
/// (run by Benchmarks/access.py, which starts the agent and fake-google; method in
/// docs/BENCHMARKS-METHOD.md, "access token fetched from a metadata server; ..."):
///
/// - `shm`: `FleetTokenClient.accessToken(entry)` with the default client (the agent's
///   shared-memory segment);
/// - `endpoint`: a GET of the token path from the agent's metadata endpoint on one kept-alive
///   connection, its JSON parsed; `endpoint-new`: the same on a new connection each;
/// - `baseline`: the same GET, kept alive, from a metadata server (fake-google's, with its
///   latency): a worker fetching its own.
///
/// Options: `--socket PATH --entry NAME --endpoint HOST:PORT --baseline HOST:PORT`,
/// `--paths a,b` (all four by default), `--reads N` (shm), `--http-reads N` (endpoint paths),
/// `--baseline-reads N`, or `--seconds S` (each path for S seconds, whatever the counts). Prints
/// one JSON object a path: reads, seconds, reads a second, p50/p99/p99.9 in µs, the process's
/// first read of the path (before any warm-up) in µs, and connections opened (HTTP paths).
struct AccessReads {
    static let tokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    let option: (String, String) -> String

    func run() async throws {
        let entry = option("--entry", "bench")
        let seconds = Double(option("--seconds", "0")) ?? 0
        let client = FleetTokenClient(socketPath: option("--socket", FleetTokenClient.defaultSocketPath))
        for path in option("--paths", "shm,endpoint,endpoint-new,baseline").split(separator: ",") {
            var figures: [String: Any]
            switch path {
            case "shm":
                let reads = Int(option("--reads", "200000")) ?? 200_000
                (_, figures) = try await measureReads(limit: reads, seconds: seconds, warmUp: 2000) {
                    try await client.accessToken(entry).jwt
                }
                figures["shared_memory_reads"] = client.sharedMemoryReads
            case "endpoint", "endpoint-new", "baseline":
                let baseline = path == "baseline"
                let (host, port) = try Self.address(option(baseline ? "--baseline" : "--endpoint", ""))
                let getter = try HTTPGetter(
                    host: host,
                    port: port,
                    path: Self.tokenPath,
                    keepAlive: path != "endpoint-new"
                )
                let reads =
                    baseline
                    ? Int(option("--baseline-reads", "1000")) ?? 1000 : Int(option("--http-reads", "5000")) ?? 5000
                let first: String
                (first, figures) = try await measureReads(limit: reads, seconds: seconds, warmUp: baseline ? 10 : 200) {
                    try Self.accessToken(in: try getter.get())
                }
                // The endpoint serves the entry's token, the one in its segment.
                if !baseline, try await first != client.accessToken(entry).jwt {
                    throw BenchError("the endpoint's token is not the one in the entry's segment")
                }
                figures["connections"] = getter.connections
            default:
                throw BenchError("unknown path \(path) (shm, endpoint, endpoint-new, baseline)")
            }
            figures["path"] = String(path)
            let data = try JSONSerialization.data(withJSONObject: figures, options: [.sortedKeys])
            FileHandle.standardOutput.write(data + Data("\n".utf8))
        }
    }

    /// Times `read`: its first call alone (the process's first read), then `warmUp` calls
    /// untimed, then `limit` calls, or as many as `seconds` holds when it is above 0. Returns
    /// the first read's token and the figures.
    private func measureReads(
        limit: Int,
        seconds: Double,
        warmUp: Int,
        _ read: () async throws -> String
    ) async throws -> (first: String, figures: [String: Any]) {
        var start = monotonicNanoseconds()
        let first = try await read()
        let firstNanoseconds = monotonicNanoseconds() &- start
        for _ in 0..<warmUp { _ = try await read() }
        let limit = seconds > 0 ? Int.max : limit
        var latencies: [UInt64] = []
        latencies.reserveCapacity(seconds > 0 ? 1 << 22 : limit)
        let began = monotonicNanoseconds()
        let deadline = seconds > 0 ? began + UInt64(seconds * 1e9) : UInt64.max
        while latencies.count < limit {
            start = monotonicNanoseconds()
            if start >= deadline { break }
            _ = try await read()
            latencies.append(monotonicNanoseconds() &- start)
        }
        let total = Double(monotonicNanoseconds() &- began) / 1e9
        latencies.sort()
        func percentile(_ p: Double) -> Double {
            Double(latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))]) / 1000
        }
        return (
            first,
            [
                "reads": latencies.count, "seconds": total, "reads_per_s": Double(latencies.count) / total,
                "p50_us": percentile(0.5), "p99_us": percentile(0.99), "p999_us": percentile(0.999),
                "first_us": Double(firstNanoseconds) / 1000,
            ]
        )
    }

    /// `access_token` of a metadata server's JSON answer.
    static func accessToken(in body: [UInt8]) throws -> String {
        guard let object = try JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let token = object["access_token"] as? String
        else { throw BenchError("no access_token in the answer") }
        return token
    }

    /// `HOST:PORT` (an IPv4 literal).
    static func address(_ text: String) throws -> (String, Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]) else {
            throw BenchError("not HOST:PORT: \(text)")
        }
        return (String(text[..<colon]), port)
    }
}
