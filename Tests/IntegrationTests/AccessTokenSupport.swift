import FakeGoogle
import Foundation
import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// An agent serving access tokens from a fake Google: the host's token from the fake's metadata
/// server, every `generateAccessToken` at the fake's IAM Credentials.
enum AccessTokenAgent {
    static let admin = "fleet-admin@fake-project.iam.gserviceaccount.com"
    static let viewer = "eta-viewer@fake-project.iam.gserviceaccount.com"
    static let other = "ops@fake-project.iam.gserviceaccount.com"

    /// A fake that impersonates ``admin``, ``viewer`` and ``other``.
    static func fake() async throws -> FakeGoogle {
        try await FakeGoogle.start(accounts: [admin, viewer, other])
    }

    /// The environment of an agent that finds no credentials file, so it asks the fake's
    /// metadata server.
    static func environment(_ fake: FakeGoogle, directory: URL) -> [String: String] {
        [
            "GOOGLE_APPLICATION_CREDENTIALS": "", "CREDENTIALS_DIRECTORY": "",
            "CLOUDSDK_CONFIG": directory.appendingPathComponent("no-gcloud").path,
            "GCE_METADATA_HOST": fake.metadataHost,
        ]
    }

    /// `{"service_account": account, "allow": {"users": [this uid]}}` and `extra` keys.
    static func entry(_ account: String, extra: String = "") -> String {
        #"{"service_account": "\#(account)", "allow": {"users": [\#(getuid())]}\#(extra)}"#
    }

    /// Writes a config of `entries` (`"name": {...}` pairs) and `extra` top-level keys at the fake's
    /// IAM endpoint; returns its path.
    static func config(_ fake: FakeGoogle, directory: URL, entries: String, extra: String = "") throws -> String {
        let path = directory.appendingPathComponent("config.json").path
        let json = #"{"access_tokens": {\#(entries)}, "iam_endpoint": "\#(fake.iamEndpoint)"\#(extra)}"#
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// An agent on `entries`, with `arguments` added.
    static func start(
        _ fake: FakeGoogle,
        entries: String,
        extra: String = "",
        arguments: [String] = [],
        socketPath: String? = nil,
        environment: [String: String] = [:],
        launcher: [String]? = nil
    ) async throws -> AgentProcess {
        let directory = try AgentProcess.makeTemporaryDirectory()
        let path = try config(fake, directory: directory, entries: entries, extra: extra)
        return try await AgentProcess(
            ["--config", path] + arguments,
            socketPath: socketPath,
            environment: Self.environment(fake, directory: directory).merging(environment) { $1 },
            launcher: launcher
        )
    }

    /// The access token `reply` (`OK <token> <expires-at>`) carries and its expiry, when it is one.
    static func token(_ reply: String?) -> (token: String, expiresAt: Int)? {
        guard let reply, let token = tokenOf(reply), let expiresAt = Int(reply.split(separator: " ")[2]) else {
            return nil
        }
        return (token, expiresAt)
    }

    /// Waits until the agent has applied `count` reloads.
    static func reloaded(_ agent: AgentProcess, count: Int) async -> Bool {
        await eventually(within: 60, every: .milliseconds(50)) {
            ((try? await agent.stats())?["reloads"] ?? 0) >= count
        }
    }
}
