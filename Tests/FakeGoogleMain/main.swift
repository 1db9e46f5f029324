import FakeGoogle
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

// fake-google: Google's metadata server, OAuth token endpoint and IAM Credentials on one loopback
// port, for shell scripts (and systemd-nspawn containers), with Workload Identity Federation's
// STS and the AWS and Azure instance metadata it reads subject tokens from. Runs until killed.
// Prints what a caller needs, one `name value` line each, and `listening <port>` last, once ready.
//
// A test double: it binds loopback only (`--host` of 127.0.0.0/8, ::1 or localhost; anything else
// exits 2) and says so on standard error when it starts.

let usage = """
    usage: fake-google --port P [--host H] [--iam-latency-ms N] [--metadata-latency-ms MIN-MAX]
                       [--expires-in S] [--accounts a@b,c@d]
                       [--write-adc-service-account PATH | --write-adc-authorized-user PATH]
                       [--quota-project ID] [--write-public-key PATH] [--log-calls yes]
                       [--write-external-account DIR] [--aws-region R] [--require-imdsv2 yes|no]
                       [--sts-expires-in-string yes]
    --host H: the address to listen on, loopback only: one of 127.0.0.0/8 (default 127.0.0.1),
    ::1 or localhost; any other exits 2.
    --metadata-latency-ms MIN-MAX (or N): each answer of the metadata server's token path is
    delayed by a time drawn uniformly from MIN to MAX ms.
    --log-calls yes: after `listening`, one line per call as it is answered (a benchmark counts
    calls by them): `signJwt <unix-ms received> <status> <account>`,
    `generateAccessToken <unix-ms received> <status> <account>`, `metadata <unix-ms received> <status>`,
    `sts <unix-ms received> <status> <audience> <subject-token-type> <aws>` (<aws>: `-` for other
    types, `verified:<region>` or `refused`), `aws <unix-ms received> <status> <method> <path> <v2>`
    (<v2>: `token` with a valid IMDSv2 session token, else `-`), `azure <unix-ms received> <status>
    <resource>`, `project <unix-ms received> <status> <project>`.
    --write-external-account DIR: writes external_account files (Workload Identity Federation, as
    gcloud's create-cred-config) into DIR, each impersonating the first account: file-text.json
    (subject-token.txt), file-json.json (subject-token.json, field id_token), url.json (the fake
    Azure token URL), aws.json (the fake AWS metadata, IMDSv2), executable.json (executable.sh,
    pluggable auth); prints `external-account <name> <path>` for each.
    --aws-region R: the fake AWS instance's region (availability zone Ra; default us-east-1b).
    --require-imdsv2 no: the fake AWS metadata also serves requests without a session token.
    --sts-expires-in-string yes: STS sends expires_in as a JSON string.
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
    "--write-external-account", "--aws-region", "--require-imdsv2", "--sts-expires-in-string",
]
while let name = arguments.popFirst() {
    if name == "--help" || name == "-h" {
        print(usage)
        exit(0)
    }
    if name == "--self-check-sigv4" {
        // Not in the usage: computes AWS's published SigV4 test-suite signatures with the fake's
        // verifier and exits 0 when each matches, 1 when one does not.
        var passed = true
        for (example, computed) in FakeAWSSignature.checkPublishedExamples() {
            let verdict = computed == example.expected ? "ok" : "MISMATCH (expected \(example.expected))"
            print("sigv4 \(example.name) \(computed) \(verdict)")
            passed = passed && computed == example.expected
        }
        exit(passed ? 0 : 1)
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

func write(_ data: Data, to path: String, mode: Int = 0o600) {
    guard FileManager.default.createFile(atPath: path, contents: data, attributes: [.posixPermissions: mode]) else {
        fail("cannot write \(path)")
    }
}

/// `path` as one word of a shell-like command line (google-auth splits `command` with `shlex`).
func shellWord(_ path: String) -> String {
    let plain = path.allSatisfy { $0.isLetter || $0.isNumber || "/._-+:@%,=".contains($0) }
    return plain ? path : "'" + path.replacingOccurrences(of: "'", with: "'\\''") + "'"
}

/// Writes the external_account files of `--write-external-account` into `directory`, each
/// impersonating `account`, and returns their `external-account <name> <path>` lines.
func writeExternalAccounts(of fake: FakeGoogle, into directory: String, impersonating account: String) -> [String] {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
        fail("--write-external-account \(directory): not a directory")
    }
    let directory = URL(fileURLWithPath: directory).standardizedFileURL.path
    func path(_ name: String) -> String { directory + "/" + name }
    // A week: a long-running fake's files keep working.
    let token = fake.issueSubjectToken(lifetime: 7 * 86400)
    // google-auth reads a text file's token as it is: no newline after it.
    write(Data(token.utf8), to: path("subject-token.txt"))
    write(try! JSONSerialization.data(withJSONObject: ["id_token": token]), to: path("subject-token.json"))
    fake.registerAzureResource(FakeGoogle.azureDefaultResource)
    let script = """
        #!/bin/sh
        # Written by fake-google --write-external-account: a pluggable-auth executable that prints
        # the fake's registered subject token, valid for an hour from now.
        now=$(date +%s)
        printf '{"version": 1, "success": true, "token_type": "%s", "id_token": "%s", "expiration_time": %d}\\n' \\
            '\(FakeGoogle.idTokenType)' '\(token)' $((now + 3600))

        """
    write(Data(script.utf8), to: path("executable.sh"), mode: 0o700)
    let files: [(String, String, [String: Any])] = [
        ("file-text", FakeGoogle.jwtTokenType, FakeGoogle.fileCredentialSource(path: path("subject-token.txt"))),
        (
            "file-json", FakeGoogle.jwtTokenType,
            FakeGoogle.fileCredentialSource(path: path("subject-token.json"), jsonField: "id_token")
        ),
        ("url", FakeGoogle.jwtTokenType, fake.azureCredentialSource()),
        ("aws", FakeGoogle.awsTokenType, fake.awsCredentialSource(imdsv2: true)),
        (
            "executable", FakeGoogle.idTokenType,
            FakeGoogle.executableCredentialSource(command: shellWord(path("executable.sh")))
        ),
    ]
    var lines: [String] = []
    for (name, type, source) in files {
        let json = fake.externalAccountJSON(subjectTokenType: type, credentialSource: source, impersonate: account)
        write(json, to: path(name + ".json"))
        lines.append("external-account \(name) \(path(name + ".json"))")
    }
    return lines
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
    if let region = options["--aws-region"] { fake.setAWSRegion(region) }
    if options["--require-imdsv2"] == "no" { fake.requireIMDSv2 = false }
    if options["--sts-expires-in-string"] == "yes" { fake.stsExpiresInAsString = true }
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
    lines += [
        "sts-token-url \(fake.stsTokenURL)", "audience \(FakeGoogle.standardAudience)",
        "aws-metadata-url \(fake.awsMetadataURL)", "aws-region-url \(fake.awsRegionURL)",
        "aws-session-token-url \(fake.awsSessionTokenURL)", "aws-region \(fake.awsRegion)",
        "aws-role \(fake.awsRoleName)",
        "aws-require-imdsv2 \(fake.requireIMDSv2 ? "yes" : "no")",
        "aws-access-key-id \(fake.awsAccessKeyID)", "aws-secret-access-key \(fake.awsSecretAccessKey)",
        "aws-session-token \(fake.awsSessionToken)",
    ]
    if let directory = options["--write-external-account"] {
        lines += writeExternalAccounts(of: fake, into: directory, impersonating: accounts.first ?? "")
    }
    lines.append("listening \(fake.port)")
    // Unbuffered, so a script reading a pipe sees `listening` at once.
    FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    guard options["--log-calls"] == "yes" else {
        while true { try await Task.sleep(for: .seconds(3600)) }
    }
    // Each record's count so far: the lines for the calls after it are written every 100 ms.
    var logged = (signJwt: 0, generateAccessToken: 0, metadata: 0, sts: 0, aws: 0, azure: 0, project: 0)
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
        let exchanges = fake.stsRequests
        for request in exchanges.dropFirst(logged.sts) {
            let aws = request.awsSignatureVerified.map { $0 ? "verified:\(request.awsRegion ?? "")" : "refused" } ?? "-"
            lines.append(
                "sts \(milliseconds(request.receivedAt)) \(request.status) \(request.audience ?? "-") "
                    + "\(request.subjectTokenType ?? "-") \(aws)\n"
            )
        }
        let aws = fake.awsMetadataRequests
        for request in aws.dropFirst(logged.aws) {
            lines.append(
                "aws \(milliseconds(request.receivedAt)) \(request.status) \(request.method) \(request.path) "
                    + "\(request.hadSessionToken ? "token" : "-")\n"
            )
        }
        let azure = fake.azureTokenRequests
        for request in azure.dropFirst(logged.azure) {
            lines.append("azure \(milliseconds(request.receivedAt)) \(request.status) \(request.resource ?? "-")\n")
        }
        let projects = fake.projectRequests
        for request in projects.dropFirst(logged.project) {
            lines.append("project \(milliseconds(request.receivedAt)) \(request.status) \(request.project)\n")
        }
        logged = (
            signatures.count, generated.count, metadata.count, exchanges.count, aws.count, azure.count, projects.count
        )
        if !lines.isEmpty { FileHandle.standardOutput.write(Data(lines.joined().utf8)) }
    }
} catch {
    fail("\(error)")
}
