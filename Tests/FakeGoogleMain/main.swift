import FakeGoogle
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// fake-google: Google's metadata server, OAuth token endpoint and IAM Credentials on one loopback
// port, for shell scripts (and systemd-nspawn containers). Runs until killed. Prints what a
// caller needs, one `name value` line each, and `listening <port>` last, once ready.
//
// A test double: it binds loopback only (`--host` of 127.0.0.0/8, ::1 or localhost; anything else
// exits 2) and says so on standard error when it starts.

let usage = """
    usage: fake-google --port P [--host H] [--iam-latency-ms N] [--metadata-latency-ms MIN-MAX]
                       [--expires-in S] [--accounts a@b,c@d]
                       [--write-adc-service-account PATH | --write-adc-authorized-user PATH]
                       [--quota-project ID] [--write-public-key PATH] [--log-calls yes]
    --host H: the address to listen on, loopback only: one of 127.0.0.0/8 (default 127.0.0.1),
    ::1 or localhost; any other exits 2.
    --metadata-latency-ms MIN-MAX (or N): each answer of the metadata server's token path is
    delayed by a time drawn uniformly from MIN to MAX ms.
    --log-calls yes: after `listening`, one line per call as it is answered (a benchmark counts
    calls by them): `signJwt <unix-ms received> <status> <account>`,
    `generateAccessToken <unix-ms received> <status> <account>`, `metadata <unix-ms received> <status>`.
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("fake-google: \(message)\n\(usage)\n".utf8))
    exit(2)
}

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
let known: Set<String> = [
    "--port", "--host", "--iam-latency-ms", "--metadata-latency-ms", "--expires-in", "--accounts",
    "--write-adc-service-account",
    "--write-adc-authorized-user", "--quota-project", "--write-public-key", "--log-calls",
]
while let name = arguments.popFirst() {
    if name == "--help" || name == "-h" {
        print(usage)
        exit(0)
    }
    guard known.contains(name) else { fail("unknown option \(name)") }
    guard let value = arguments.popFirst() else { fail("\(name) needs a value") }
    options[name] = value
}
guard let port = options["--port"].flatMap(Int.init), (0...65535).contains(port) else { fail("--port P is required") }

/// Whether `host` is a loopback address: an IPv4 literal of 127.0.0.0/8, the IPv6 literal `::1`,
/// or the name `localhost`.
func isLoopback(_ host: String) -> Bool {
    if host == "localhost" { return true }
    var v4 = in_addr()
    if inet_pton(AF_INET, host, &v4) == 1 { return withUnsafeBytes(of: v4) { $0[0] == 127 } }
    var v6 = in6_addr()
    var loopback = in6_addr()
    guard inet_pton(AF_INET6, host, &v6) == 1, inet_pton(AF_INET6, "::1", &loopback) == 1 else { return false }
    return withUnsafeBytes(of: v6) { found in withUnsafeBytes(of: loopback) { found.elementsEqual($0) } }
}
let host = options["--host"] ?? "127.0.0.1"
guard isLoopback(host) else {
    fail(
        "--host \(host) refused: fake-google is a test double and listens on loopback only "
            + "(127.0.0.0/8, ::1 or localhost)"
    )
}
if options["--write-adc-service-account"] != nil, options["--write-adc-authorized-user"] != nil {
    fail("--write-adc-service-account and --write-adc-authorized-user exclude each other")
}
/// `MIN-MAX` or `N` milliseconds, 0 <= MIN <= MAX.
func latencyRange(_ text: String) -> ClosedRange<Int>? {
    let bounds = text.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
    guard let low = Int(bounds[0]), let high = Int(bounds[bounds.count - 1]), 0 <= low, low <= high else { return nil }
    return low...high
}
var metadataLatency: ClosedRange<Int>?
if let text = options["--metadata-latency-ms"] {
    guard let range = latencyRange(text) else { fail("--metadata-latency-ms takes MIN-MAX or N milliseconds") }
    metadataLatency = range
}
let accounts =
    options["--accounts"].map { $0.split(separator: ",").map(String.init) } ?? [FakeGoogle.defaultSigningAccount]

func write(_ data: Data, to path: String) {
    guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
        fail("cannot write \(path)")
    }
}

FileHandle.standardError.write(
    Data("fake-google: a test double of Google's endpoints, loopback only; never point production at it\n".utf8)
)
do {
    let fake = try await FakeGoogle.start(host: host, port: port, accounts: accounts)
    if let milliseconds = options["--iam-latency-ms"].flatMap(Int.init) {
        fake.setIAMLatency(milliseconds: milliseconds)
    }
    if let metadataLatency { fake.setMetadataLatency(milliseconds: metadataLatency) }
    if let seconds = options["--expires-in"].flatMap(Int.init) { fake.setAccessTokenLifetime(seconds: seconds) }
    if let path = options["--write-adc-service-account"] { write(fake.serviceAccountKeyJSON(), to: path) }
    if let path = options["--write-adc-authorized-user"] {
        write(fake.authorizedUserJSON(tokenURI: fake.tokenURI, quotaProject: options["--quota-project"]), to: path)
    }
    if let path = options["--write-public-key"] {
        // One PEM per account, in the order of --accounts (the `account` lines below).
        write(Data((accounts.compactMap { fake.publicKeyPEM(for: $0) }.joined(separator: "\n") + "\n").utf8), to: path)
    }
    var lines = [
        "metadata-host \(fake.metadataHost)", "token-uri \(fake.tokenURI)", "iam-endpoint \(fake.iamEndpoint)",
    ]
    for account in accounts { lines.append("account \(account) kid \(fake.keyID(for: account) ?? "")") }
    lines.append("listening \(fake.port)")
    // Unbuffered, so a script reading a pipe sees `listening` at once.
    FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    guard options["--log-calls"] == "yes" else {
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
    // Each record's count so far: the lines for the calls after it are written every 100 ms.
    var logged = (signJwt: 0, generateAccessToken: 0, metadata: 0)
    func milliseconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970 * 1000) }
    while true {
        try await Task.sleep(for: .milliseconds(100))
        var lines: [String] = []
        let signatures = fake.signJwtCalls
        for call in signatures.dropFirst(logged.signJwt) {
            lines.append("signJwt \(milliseconds(call.receivedAt)) \(call.status) \(call.account)\n")
        }
        let generated = fake.generateAccessTokenCalls
        for call in generated.dropFirst(logged.generateAccessToken) {
            lines.append("generateAccessToken \(milliseconds(call.receivedAt)) \(call.status) \(call.account)\n")
        }
        let metadata = fake.metadataRequests
        for request in metadata.dropFirst(logged.metadata) {
            lines.append("metadata \(milliseconds(request.receivedAt)) \(request.status)\n")
        }
        logged = (signatures.count, generated.count, metadata.count)
        if !lines.isEmpty { FileHandle.standardOutput.write(Data(lines.joined().utf8)) }
    }
} catch {
    fail("\(error)")
}
