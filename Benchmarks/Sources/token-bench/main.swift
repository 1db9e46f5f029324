// Side-by-side benchmarks of fleet-tokend, run in one process and one go so the numbers compare:
//  1. the agent's raw protocol vs Redis over a Unix socket (the hot path's yardstick);
//  2. what FleetTokenClient replaces (an HTTP GET of the token from a local provider, with
//     AsyncHTTPClient and with URLSession as the SDK samples do) vs the client through the agent,
//     without and with the in-process memo.
import AsyncHTTPClient
import FleetTokenClient
import Foundation
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

let arguments = CommandLine.arguments.dropFirst()
func option(_ name: String, _ fallback: String) -> String {
    guard let index = arguments.firstIndex(of: name), arguments.index(after: index) < arguments.endIndex else {
        return fallback
    }
    return arguments[arguments.index(after: index)]
}
let agentBinary = option("--agent", ".build/release/fleet-tokend")
let operations = Int(option("--iterations", "20000"))!
let concurrency = Int(option("--concurrency", "32"))!
// `--only <text>` runs only the benchmarks whose name contains the text (e.g. to profile one);
// given more than once, those whose name contains any of them.
let only: [String] = zip(arguments, arguments.dropFirst()).compactMap { $0 == "--only" ? $1 : nil }
func wanted(_ name: String) -> Bool { only.isEmpty || only.contains { name.contains($0) } }
// `--json <path>` also writes every row measured to that file, as a JSON array (for report.sh).
let jsonPath = option("--json", "")

// `token-bench provider`: only the local provider, for scripts (stall.sh's inserts of new keys):
// prints its vehicle URL template, then serves until killed.
if arguments.first == "provider" {
    let provider = try await LocalProvider.start()
    FileHandle.standardOutput.write(Data((provider.url(kind: "vehicle") + "\n").utf8))
    while true { try await Task.sleep(for: .seconds(3600)) }
}

// `token-bench access ...`: reads of an access token from a running agent and metadata servers
// (AccessReads.swift; Benchmarks/access.py runs it).
if arguments.first == "access" {
    try await AccessReads(option: option).run()
    exit(0)
}

// `token-bench shm-reads ...`: a fixed number of shared-memory reads from a running agent, untimed,
// for callgrind (ShmReads.swift; Benchmarks/callgrind.sh runs it).
if arguments.first == "shm-reads" {
    try await ShmReads(option: option).run()
    exit(0)
}

let directory = URL(fileURLWithPath: "/tmp/ftd-bench-\(getpid())")
try? FileManager.default.removeItem(at: directory)
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
// `--socket <path>` uses an agent that already runs there (e.g. under valgrind, which cannot
// spawn one) instead of starting its own.
let externalSocket = option("--socket", "")
let socketPath = externalSocket.isEmpty ? directory.appendingPathComponent("tokens.sock").path : externalSocket

let provider = try await LocalProvider.start()
var agent: Process?
if externalSocket.isEmpty {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: agentBinary)
    process.arguments = [
        "serve", "--socket", socketPath, "--provider", "vehicle=\(provider.url(kind: "vehicle"))", "--provider",
        "custom=\(provider.url(kind: "custom"))", "--log-level", "warning",
    ]
    try process.run()
    agent = process
}
var redis: Process?
defer {
    agent?.terminate()
    // redis-server has nothing to save; SIGTERM was seen to leave it running after the benchmark.
    if let redis { kill(redis.processIdentifier, SIGKILL) }
}

func waitForSocket(_ path: String) async throws {
    for _ in 0..<200 {
        if (try? BlockingSocket(path: path)) != nil { return }
        try await Task.sleep(for: .milliseconds(25))
    }
    throw BenchError("nothing listens on \(path)")
}
try await waitForSocket(socketPath)

var results: [Measurement] = []
@MainActor func record(_ measurement: Measurement) {
    results.append(measurement)
    print(measurement.row)
}
print("fleet-tokend benchmarks: \(operations) operations each, concurrency 1 and \(concurrency)")
print(ProcessInfo.processInfo.operatingSystemVersionString, "cores:", ProcessInfo.processInfo.activeProcessorCount)
print(Measurement.header)

// 1. Raw protocol, one request outstanding, same blocking loop for both servers.
let agentSocket = try BlockingSocket(path: socketPath)
let getLine = Array("GET vehicle bench-raw\n".utf8)
let endsWithLF: (UnsafeRawBufferPointer) -> Bool = { $0.last == UInt8(ascii: "\n") }
try agentSocket.roundTrip(getLine, complete: endsWithLF)
var agentRaw: Measurement?
if wanted("agent GET, raw socket") {
    let measured = try measureBlocking("agent GET, raw socket", operations: operations) {
        try agentSocket.roundTrip(getLine, complete: endsWithLF)
    }
    agentRaw = measured
    record(measured)
}

var redisRaw: Measurement?
if !wanted("Redis GET, raw socket") {
    // not asked for
} else if let redisServer = ["/usr/bin/redis-server", "/usr/local/bin/redis-server"].first(
    where: FileManager.default.isExecutableFile
) {
    let redisSocket = directory.appendingPathComponent("redis.sock").path
    let process = Process()
    process.executableURL = URL(fileURLWithPath: redisServer)
    process.arguments = ["--port", "0", "--unixsocket", redisSocket, "--save", "", "--appendonly", "no"]
    process.standardOutput = FileHandle.nullDevice
    try process.run()
    redis = process
    try await waitForSocket(redisSocket)
    let connection = try BlockingSocket(path: redisSocket)
    let token = LocalProvider.token(for: "bench-raw", kind: "vehicle")
    let key = "token:vehicle:bench-raw"
    let set = "*3\r\n$3\r\nSET\r\n$\(key.utf8.count)\r\n\(key)\r\n$\(token.utf8.count)\r\n\(token)\r\n"
    try connection.roundTrip(Array(set.utf8), complete: endsWithLF)
    let get = Array("*2\r\n$3\r\nGET\r\n$\(key.utf8.count)\r\n\(key)\r\n".utf8)
    // A bulk reply is "$<n>\r\n<n bytes>\r\n": complete once that many bytes arrived.
    let expected = "$\(token.utf8.count)\r\n".utf8.count + token.utf8.count + 2
    let measured = try measureBlocking("Redis GET, raw socket", operations: operations) {
        try connection.roundTrip(get) { $0.count >= expected }
    }
    redisRaw = measured
    record(measured)
} else {
    print("| Redis GET, raw socket | – | – | not installed | | |")
}

// 1b. Isolation: a GET of a new vehicle id (a fetch from the provider) while another kind is
// flooded with 960 first fetches its provider answers in 500 ms, against the same GETs without
// the flood, in this run. The flood's replies are never read; its connections stay open.
if wanted("new vehicle id") {
    let fetches = min(operations, 2000)
    var serial = 0
    let fetchSocket = try BlockingSocket(path: socketPath)
    func freshGet() throws {
        serial += 1
        try fetchSocket.roundTrip(Array("GET vehicle fresh-\(serial)\n".utf8), complete: endsWithLF)
    }
    let quiet = try measureBlocking("agent GET, new vehicle id (a fetch)", operations: fetches, warmUp: 200) {
        try freshGet()
    }
    record(quiet)
    var flood: [BlockingSocket] = []
    for connection in 0..<8 {
        let socket = try BlockingSocket(path: socketPath)
        try socket.send(Array((0..<120).map { "GET custom flood-\(connection)-\($0)\n" }.joined().utf8))
        flood.append(socket)
    }
    try await Task.sleep(for: .milliseconds(200))
    let flooded = try measureBlocking(
        "agent GET, new vehicle id (a fetch), custom kind flooded",
        operations: fetches,
        warmUp: 200
    ) { try freshGet() }
    record(flooded)
    print(
        String(
            format: "| flooded / quiet p99 | %.2fx (p50 %.2fx) | | | | |",
            flooded.percentile(0.99) / quiet.percentile(0.99),
            flooded.median / quiet.median
        )
    )
    flood.removeAll()
}

// 2. What the client replaces, and the client.
let http = HTTPClient(eventLoopGroupProvider: .singleton)
let tokenURL = provider.url(kind: "vehicle").replacingOccurrences(of: "{id}", with: "bench-http")
let httpGet: @Sendable () async throws -> Void = {
    let response = try await http.execute(HTTPClientRequest(url: tokenURL), timeout: .seconds(10))
    let body = try await response.body.collect(upTo: 65536)
    guard let object = try JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
        object["token"] is String
    else { throw BenchError("bad reply") }
}
let session = URLSession(configuration: .ephemeral)
let urlSessionGet: @Sendable () async throws -> Void = {
    let (data, _) = try await session.data(for: URLRequest(url: URL(string: tokenURL)!))
    guard let object = try JSONSerialization.jsonObject(with: data) as? [String: Any], object["token"] is String else {
        throw BenchError("bad reply")
    }
}
var noMemo = FleetTokenClient.Configuration()
noMemo.memoization = false
noMemo.sharedMemory = false
let direct = FleetTokenClient(socketPath: socketPath, configuration: noMemo)
var memoOnly = FleetTokenClient.Configuration()
memoOnly.sharedMemory = false
let memoized = FleetTokenClient(socketPath: socketPath, configuration: memoOnly)
// The default client: tokens read from the agent's shared-memory segment.
let shared = FleetTokenClient(socketPath: socketPath)
let viaShared: @Sendable () async throws -> Void = { _ = try await shared.token(.vehicle("bench-client")) }
let viaAgent: @Sendable () async throws -> Void = { _ = try await direct.token(.vehicle("bench-client")) }
let viaMemo: @Sendable () async throws -> Void = { _ = try await memoized.token(.vehicle("bench-client")) }
// Concurrent callers of one key share one request in the client; spread them over 64 keys to
// measure the pipelined connection itself.
let spread = Mutex(0)
let viaAgentSpread: @Sendable () async throws -> Void = {
    let index = spread.withLock { value -> Int in
        value &+= 1
        return value % 64
    }
    _ = try await direct.token(.vehicle("bench-spread-\(index)"))
}
let sharedSpread = Mutex(0)
let viaSharedSpread: @Sendable () async throws -> Void = {
    let index = sharedSpread.withLock { value -> Int in
        value &+= 1
        return value % 64
    }
    _ = try await shared.token(.vehicle("bench-spread-\(index)"))
}
// The same 64 keys as a worker holds them: subjects made once, each task going round them on its
// own counter (the row above also times building the id and a counter shared by every task).
let readySubjects = (0..<64).map { TokenSubject.vehicle("bench-spread-\($0)") }
let viaSharedReady: @Sendable (Int) async throws -> Void = { index in
    _ = try await shared.token(readySubjects[index & 63])
}

// The same 64 keys on a raw socket with `concurrency` requests in flight: the most one pipelined
// connection to the agent carries, for the client's 64-key row to be compared with.
let spreadLines = (0..<64).map { Array("GET vehicle bench-spread-\($0)\n".utf8) }
var table: [String: [Int: Measurement]] = [:]
for level in [1, concurrency] {
    if level > 1, wanted("agent GET, raw socket pipelined, 64 keys") {
        let measured = try measurePipelined(
            "agent GET, raw socket pipelined, 64 keys",
            path: socketPath,
            lines: spreadLines,
            depth: level,
            operations: operations
        )
        table[measured.name, default: [:]][level] = measured
        record(measured)
    }
    for (name, operation) in [
        ("HTTP GET, AsyncHTTPClient", httpGet), ("HTTP GET, URLSession", urlSessionGet),
        ("client.token via agent, memo off", viaAgent), ("client.token via agent, memo off, 64 keys", viaAgentSpread),
        ("client.token, memo on", viaMemo), ("client.token, shared memory", viaShared),
        ("client.token, shared memory, 64 keys", viaSharedSpread),
    ] where wanted(name) {
        let measured = try await measure(
            name,
            operations: level == 1 ? operations / 4 : operations,
            concurrency: level,
            operation
        )
        table[name, default: [:]][level] = measured
        record(measured)
    }
}
if wanted("client.token, shared memory, 64 ready keys") {
    for level in [1, concurrency] {
        let name = "client.token, shared memory, 64 ready keys"
        let measured = try await measure(
            name,
            operations: level == 1 ? operations / 4 : operations,
            concurrency: level,
            indexed: viaSharedReady
        )
        table[name, default: [:]][level] = measured
        record(measured)
    }
}
// The memo from the main actor: the loop a new user writes in an executable's top-level code.
var mainActorMemo: Measurement?
if wanted("client.token, memo on, main actor") {
    let measured = try await measureOnMainActor("client.token, memo on, main actor", operations: operations) {
        _ = try await memoized.token(.vehicle("hot1"))
    }
    mainActorMemo = measured
    record(measured)
}
// The measuring loop's own cost: two clock reads and an await of a call that does nothing. It is
// in every p50 above; a figure under a microsecond is best read with it subtracted.
if wanted("timer floor") {
    let nothing: @Sendable () async throws -> Void = {}
    record(try await measure("timer floor (empty call)", operations: operations, concurrency: 1, nothing))
    // The same for the rows that take a counter (the 64 ready keys).
    let nothingIndexed: @Sendable (Int) async throws -> Void = { _ in }
    record(
        try await measure(
            "timer floor (empty indexed call)",
            operations: operations,
            concurrency: 1,
            indexed: nothingIndexed
        )
    )
}
if wanted("client.token, shared memory, main actor") {
    let measured = try await measureOnMainActor("client.token, shared memory, main actor", operations: operations) {
        _ = try await shared.token(.vehicle("hot1"))
    }
    record(measured)
}
// The C reader (libfleet-tokend-reader) beside the client: `--c-reader PATH` names
// Benchmarks/shm-reads.c built, which reads the same 64 keys from the same agent's segment, each
// read timed as this program times the client's, with its own timer floor (an empty C call).
var externalRows: [[String: Any]] = []
let cReader = option("--c-reader", "")
if !cReader.isEmpty, wanted("C reader, shared memory, 64 ready keys") {
    // The keys must be cached: the client's rows above read them; read each once more here.
    for subject in readySubjects { _ = try await shared.token(subject) }
    let reads = operations / 4
    let output = try runToEnd(cReader, [socketPath, "vehicle", "bench-spread-", "64", String(reads), "--timed"])
    guard let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any],
        let p50 = object["p50_ns"] as? Double, let p99 = object["p99_ns"] as? Double,
        let rate = object["reads_per_s"] as? Double, let floor50 = object["floor_p50_ns"] as? Double,
        let floor99 = object["floor_p99_ns"] as? Double, object["hits"] as? Int == reads
    else { throw BenchError("the C reader: \(output)") }
    for (name, p50, p99, rate) in [
        ("C reader, shared memory, 64 ready keys", p50, p99, rate),
        ("timer floor (empty C call)", floor50, floor99, 0),
    ] {
        print(String(format: "| %@ | 1 | %d | %.3f | %.3f | %.0f |", name, reads, p50 / 1000, p99 / 1000, rate))
        externalRows.append([
            "name": name, "concurrency": 1, "operations": reads, "p50_us": p50 / 1000, "p99_us": p99 / 1000,
            "ops_per_s": rate,
        ])
    }
}
let sharedReads = shared.sharedMemoryReads
try await http.shutdown().get()
await provider.stop()

print("\nRatios (higher is better for the agent):")
if let redisRaw, let agentRaw {
    print(
        String(
            format: "- agent raw GET vs Redis raw GET, p50 latency: %.2fx (Redis p50 / agent p50)",
            redisRaw.median / agentRaw.median
        )
    )
}
if let raw = table["agent GET, raw socket pipelined, 64 keys"]?[concurrency],
    let client = table["client.token via agent, memo off, 64 keys"]?[concurrency]
{
    print(
        String(
            format: "- concurrency %d, 64 keys, one connection: client / raw pipelined socket, throughput %.2fx",
            concurrency,
            client.opsPerSecond / raw.opsPerSecond
        )
    )
}
if let mainActorMemo, let detached = table["client.token, memo on"]?[1] {
    print(
        String(
            format: "- memo hit p50: main actor %.2f µs, a task on the global executor %.2f µs",
            mainActorMemo.median * 1e6,
            detached.median * 1e6
        )
    )
}
for level in [1, concurrency] {
    guard let agentOnly = table["client.token via agent, memo off, 64 keys"]?[level],
        let memo = table["client.token, memo on"]?[level]
    else { continue }
    for baseline in ["HTTP GET, AsyncHTTPClient", "HTTP GET, URLSession"] {
        guard let http = table[baseline]?[level] else { continue }
        print(
            String(
                format:
                    "- concurrency %d: %@ / client via agent: p50 %.1fx, throughput %.1fx; / client with memo: p50 %.1fx, throughput %.1fx",
                level,
                baseline,
                http.median / agentOnly.median,
                agentOnly.opsPerSecond / http.opsPerSecond,
                http.median / memo.median,
                memo.opsPerSecond / http.opsPerSecond
            )
        )
    }
}
if let sharedRow = table["client.token, shared memory, 64 ready keys"]?[concurrency]
    ?? table["client.token, shared memory, 64 keys"]?[concurrency]
{
    print(
        String(
            format:
                "- concurrency %d, 64 keys: client reading shared memory %.0f tokens/s (%d reads from memory in all)",
            concurrency,
            sharedRow.opsPerSecond,
            sharedReads
        )
    )
}
if !jsonPath.isEmpty {
    let rows: [[String: Any]] =
        results.map {
            [
                "name": $0.name, "concurrency": $0.concurrency, "operations": $0.operations,
                "p50_us": $0.median * 1e6, "p99_us": $0.percentile(0.99) * 1e6, "ops_per_s": $0.opsPerSecond,
            ]
        } + externalRows
    try JSONSerialization.data(withJSONObject: rows, options: [.prettyPrinted, .sortedKeys])
        .write(to: URL(fileURLWithPath: jsonPath))
}
try? FileManager.default.removeItem(at: directory)
