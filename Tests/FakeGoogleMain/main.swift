import FakeGoogle
import Foundation

// fake-google: Google's metadata server, OAuth token endpoint and IAM Credentials on one loopback
// port, for shell scripts (and systemd-nspawn containers). Runs until killed. Prints what a
// caller needs, one `name value` line each, and `listening <port>` last, once ready.

let usage = """
    usage: fake-google --port P [--host H] [--iam-latency-ms N] [--expires-in S] [--accounts a@b,c@d]
                       [--write-adc-service-account PATH | --write-adc-authorized-user PATH]
                       [--quota-project ID] [--write-public-key PATH] [--log-calls yes]
    --log-calls yes: after `listening`, one line per signJwt call as it is answered:
    `signJwt <unix-ms received> <status> <account>` (a benchmark counts signatures by them).
    """

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("fake-google: \(message)\n\(usage)\n".utf8))
    exit(2)
}

var options: [String: String] = [:]
var arguments = CommandLine.arguments.dropFirst()
let known: Set<String> = [
    "--port", "--host", "--iam-latency-ms", "--expires-in", "--accounts", "--write-adc-service-account",
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
if options["--write-adc-service-account"] != nil, options["--write-adc-authorized-user"] != nil {
    fail("--write-adc-service-account and --write-adc-authorized-user exclude each other")
}
let accounts =
    options["--accounts"].map { $0.split(separator: ",").map(String.init) } ?? [FakeGoogle.defaultSigningAccount]

func write(_ data: Data, to path: String) {
    guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: 0o600]) else {
        fail("cannot write \(path)")
    }
}

do {
    let fake = try await FakeGoogle.start(host: options["--host"] ?? "127.0.0.1", port: port, accounts: accounts)
    if let milliseconds = options["--iam-latency-ms"].flatMap(Int.init) {
        fake.setIAMLatency(milliseconds: milliseconds)
    }
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
    var logged = 0
    while true {
        try await Task.sleep(for: .milliseconds(100))
        let calls = fake.signJwtCalls
        guard calls.count > logged else { continue }
        let lines = calls[logged...].map { call in
            "signJwt \(Int64(call.receivedAt.timeIntervalSince1970 * 1000)) \(call.status) \(call.account)\n"
        }
        logged = calls.count
        FileHandle.standardOutput.write(Data(lines.joined().utf8))
    }
} catch {
    fail("\(error)")
}
