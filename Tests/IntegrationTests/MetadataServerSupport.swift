import FakeGoogle
import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The real agent's GCE metadata endpoint (`metadata_server`), with the access-token entries of
/// ``AccessTokenAgent`` at a fake Google, and the clients the tests point at it: curl, and
/// Google's own Python auth library (google-auth, from PyPI).
enum MetadataAgent {
    typealias Agent = AccessTokenAgent

    static let tokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"
    static let emailPath = "/computeMetadata/v1/instance/service-accounts/default/email"

    /// A loopback port nothing listens on now, for an agent to bind next (``freeLoopbackPort()``:
    /// below the kernel's ephemeral range, which the suite's own connections draw their local
    /// ports from; a port the kernel handed out was seen taken again before the agent bound it).
    static func freePort() throws -> UInt16 { UInt16(try freeLoopbackPort()) }

    /// `, "metadata_server": {...}` listening on `port` with `defaultEntry`.
    static func key(port: UInt16, defaultEntry: String, projectID: String? = nil) -> String {
        let project = projectID.map { #", "project_id": "\#($0)""# } ?? ""
        return #", "metadata_server": {"listen": "127.0.0.1:\#(port)", "default": "\#(defaultEntry)"\#(project)}"#
    }

    /// An agent serving `entries` with the endpoint on a free port; the agent and the port.
    static func start(_ fake: FakeGoogle, entries: String, defaultEntry: String = "fleet-admin") async throws
        -> (agent: AgentProcess, port: UInt16)
    {
        let port = try freePort()
        let agent = try await Agent.start(fake, entries: entries, extra: key(port: port, defaultEntry: defaultEntry))
        let listening = await eventually { agent.log.contains("serving the GCE metadata endpoint") }
        try #require(listening, "the endpoint did not start:\n\(agent.log)")
        return (agent, port)
    }

    /// An answer: its status and body.
    struct Answer {
        var status: Int
        var body: String
    }

    /// GET `path` at the endpoint with curl, with `Metadata-Flavor: Google` unless `flavor` is
    /// false, and `headers`; run as `user` (through runuser) when given.
    static func get(
        port: UInt16,
        _ path: String,
        flavor: Bool = true,
        headers: [String] = [],
        as user: String? = nil
    ) async throws -> Answer {
        let curl = try #require(which("curl"), "curl is needed")
        var arguments = ["-sS", "--noproxy", "*", "--max-time", "\(Int(hangLimit))", "-w", "\n%{http_code}"]
        for header in (flavor ? ["Metadata-Flavor: Google"] : []) + headers { arguments += ["-H", header] }
        arguments.append("http://127.0.0.1:\(port)\(path)")
        let result =
            if let user {
                try await run(which("runuser")!, ["-u", user, "--", curl] + arguments)
            } else {
                try await run(curl, arguments)
            }
        try #require(result.status == 0, "curl failed: \(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = try #require(lines.last.flatMap { Int($0) }, "no status in \(result.stdout)")
        return Answer(status: status, body: lines.dropLast().joined(separator: "\n"))
    }

    /// The venv's python with google-auth, installed from PyPI by scripts/ensure-google-auth.sh
    /// when missing; the test fails, naming why, when it cannot be.
    static func googleAuthPython() async throws -> String {
        let script = DocText.root().appendingPathComponent("scripts/ensure-google-auth.sh").path
        let result = try await run("/bin/bash", [script], environment: ProcessInfo.processInfo.environment)
        try #require(result.status == 0, "scripts/ensure-google-auth.sh failed:\n\(result.stderr)")
        return try #require(result.stdout.split(separator: "\n").last.map(String.init))
    }

    /// What the google-auth script does, as an unmodified worker would: find the credentials
    /// (`google.auth.default()`, which detects the metadata server), optionally with scopes, and
    /// refresh them; it prints the credentials' module, the project, the account and the token.
    static let googleAuthScript = """
        import sys
        import google.auth
        import google.auth.transport.requests
        credentials, project = google.auth.default()
        if len(sys.argv) > 1:
            credentials = credentials.with_scopes(sys.argv[1].split(","))
        credentials.refresh(google.auth.transport.requests.Request())
        print(type(credentials).__module__, project, credentials.service_account_email, credentials.token)
        """

    /// Runs the google-auth script in a process of its own pointed at the endpoint on `port`.
    static func googleAuth(_ python: String, port: UInt16, scopes: String? = nil) async throws
        -> (status: Int32, stdout: String, stderr: String)
    {
        var environment = ProcessInfo.processInfo.environment
        environment["GCE_METADATA_HOST"] = "127.0.0.1:\(port)"
        environment["GCE_METADATA_IP"] = "127.0.0.1:\(port)"
        environment["GOOGLE_APPLICATION_CREDENTIALS"] = ""
        environment["CLOUDSDK_CONFIG"] = "/nonexistent-gcloud-config"
        environment["NO_PROXY"] = "127.0.0.1,localhost"
        environment["no_proxy"] = "127.0.0.1,localhost"
        return try await run(python, ["-c", googleAuthScript] + (scopes.map { [$0] } ?? []), environment: environment)
    }
}
