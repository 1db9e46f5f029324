import FakeGoogle
import Foundation
import TestSupport
import Testing

/// The agent's host identity through Workload Identity Federation, against the fake Google's STS,
/// AWS and Azure instance metadata and IAM Credentials: the real binary, every credential source,
/// two key-less kinds and a host access token from one STS exchange and one impersonation.
@Suite("Federation (external_account)", .serialized)
struct FederationTests {
    static let signer = FakeGoogle.defaultSigningAccount

    /// One credential source, and what the agent needs for it.
    struct Source: CustomStringConvertible {
        var name: String
        var kind: String
        var tokenType: String
        var credentialSource: [String: Any]
        var environment: [String: String] = [:]
        var description: String { name }
    }

    /// Every source, set up against `fake` in `directory`.
    static func sources(_ fake: FakeGoogle, directory: URL) throws -> [Source] {
        let token = fake.issueSubjectToken()
        let text = directory.appendingPathComponent("token.txt").path
        try Data((token + "\n").utf8).write(to: URL(fileURLWithPath: text))
        // Kubernetes projects its tokens as symbolic links into ..data.
        let data = directory.appendingPathComponent("..data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try Data(#"{"id_token": "\#(token)"}"#.utf8).write(to: data.appendingPathComponent("token.json"))
        let linked = directory.appendingPathComponent("token.json").path
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: "..data/token.json")
        let response = directory.appendingPathComponent("response.json").path
        try FakeGoogle.executableResponse(token: token, expiresAt: Date().addingTimeInterval(3600))
            .write(to: URL(fileURLWithPath: response))
        // Run as `/bin/sh <script>`: a script this process just wrote cannot be executed while a
        // program another test started at that moment still holds it open (ETXTBSY).
        let script = directory.appendingPathComponent("get-token.sh").path
        try Data("#!/bin/sh\nexec cat \(response)\n".utf8).write(to: URL(fileURLWithPath: script))
        chmod(script, 0o755)
        fake.registerAzureResource(FakeGoogle.azureDefaultResource)
        let keys = fake.addAWSAccessKey()
        return [
            Source(
                name: "file (text)",
                kind: "file",
                tokenType: FakeGoogle.jwtTokenType,
                credentialSource: FakeGoogle.fileCredentialSource(path: text)
            ),
            Source(
                name: "file (json, linked)",
                kind: "file",
                tokenType: FakeGoogle.jwtTokenType,
                credentialSource: FakeGoogle.fileCredentialSource(path: linked, jsonField: "id_token")
            ),
            Source(
                name: "url (Azure)",
                kind: "url",
                tokenType: FakeGoogle.jwtTokenType,
                credentialSource: fake.azureCredentialSource()
            ),
            Source(
                name: "executable",
                kind: "executable",
                tokenType: FakeGoogle.idTokenType,
                credentialSource: FakeGoogle.executableCredentialSource(command: "/bin/sh \(script) --flag"),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            ),
            Source(
                name: "aws (IMDSv2)",
                kind: "aws",
                tokenType: FakeGoogle.awsTokenType,
                credentialSource: fake.awsCredentialSource(imdsv2: true)
            ),
            Source(
                name: "aws (environment)",
                kind: "aws",
                tokenType: FakeGoogle.awsTokenType,
                credentialSource: fake.awsCredentialSource(imdsv2: true),
                environment: [
                    "AWS_REGION": "eu-west-3", "AWS_ACCESS_KEY_ID": keys.accessKeyID,
                    "AWS_SECRET_ACCESS_KEY": keys.secretAccessKey,
                ]
            ),
        ]
    }

    /// The environment of an agent whose credentials are the file at `path`.
    static func environment(credentials path: String, directory: URL, extra: [String: String]) -> [String: String] {
        [
            "GOOGLE_APPLICATION_CREDENTIALS": path, "CREDENTIALS_DIRECTORY": "",
            "CLOUDSDK_CONFIG": directory.appendingPathComponent("no-gcloud").path, "GCE_METADATA_HOST": "127.0.0.1:1",
            "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": "",
            "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "",
        ].merging(extra) { $1 }
    }

    /// A config with key-less `vehicle` and `trip` and the host's own access token `host`.
    static func config(_ fake: FakeGoogle, directory: URL, extra: String = "") throws -> String {
        let path = directory.appendingPathComponent("config.json").path
        let json = """
            {"issuers": {"vehicle": {"service_account": "\(signer)"}, "trip": {"service_account": "\(signer)"}},
             "access_tokens": {"host": {"source": "host", "allow": {"users": [\(getuid())]}}},
             "allow_host_identity": true, "iam_endpoint": "\(fake.iamEndpoint)"\(extra)}
            """
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// Writes an `external_account` file of `credentialSource` (and `audience`) in `directory`,
    /// and starts an agent whose host credentials it is, on ``config(_:directory:)``.
    static func agent(
        _ fake: FakeGoogle,
        directory: URL,
        audience: String = FakeGoogle.standardAudience,
        tokenType: String = FakeGoogle.jwtTokenType,
        credentialSource: [String: Any],
        environment extra: [String: String] = [:],
        configExtra: String = ""
    ) async throws -> AgentProcess {
        let file = directory.appendingPathComponent("wif.json").path
        try fake.externalAccountJSON(
            audience: audience,
            subjectTokenType: tokenType,
            credentialSource: credentialSource,
            impersonate: signer
        ).write(to: URL(fileURLWithPath: file))
        return try await AgentProcess(
            ["--config", try config(fake, directory: directory, extra: configExtra)],
            environment: environment(credentials: file, directory: directory, extra: extra)
        )
    }

    @Test func everySourceSignsTwoKindsAndServesTheHostTokenFromOneExchange() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        for source in try Self.sources(fake, directory: directory) {
            fake.clearRecords()
            let agent = try await Self.agent(
                fake,
                directory: directory,
                tokenType: source.tokenType,
                credentialSource: source.credentialSource,
                environment: source.environment
            )
            let vehicle = try #require(tokenOf(try await agent.send("GET vehicle v-1").first), "\(source)")
            let trip = try #require(tokenOf(try await agent.send("GET trip t-1").first), "\(source)")
            let host = try #require(tokenOf(try await agent.send("GET access host").first), "\(source)")
            let claims = try #require(fake.verify(vehicle, account: Self.signer), "\(source): signed by IAM")
            #expect(claims["authorization"] as? [String: String] == ["vehicleid": "v-1"])
            #expect(fake.verify(trip, account: Self.signer) != nil, "\(source)")
            #expect(fake.stsTokenCount == 1, "\(source): one STS exchange for the host")
            #expect(fake.stsRequests.allSatisfy { $0.audience == FakeGoogle.standardAudience }, "\(source)")
            if source.kind == "aws" {
                #expect(fake.stsRequests.first?.awsSignatureVerified == true, "\(source): SigV4 checked")
            }
            let impersonations = fake.generateAccessTokenCalls
            #expect(impersonations.count == 1 && impersonations.first?.account == Self.signer, "\(source)")
            #expect(impersonations.first?.issued == host, "\(source): the host token is the impersonated one")
            #expect(fake.signatureCount == 2, "\(source)")

            let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
            #expect(
                status.stdout.contains(
                    "host identity: external_account (\(source.kind)) via fleet-pool/fleet-provider, "
                        + "impersonating \(Self.signer)"
                ),
                "\(source): \(status.stdout)"
            )
            let metrics = try await agent.metricsText()
            #expect(metrics.contains("fleet_tokend_sts_calls_total 1"), "\(source)")
            #expect(metrics.contains("fleet_tokend_impersonation_calls_total 1"), "\(source)")
            let secrets =
                fake.stsRequests.compactMap(\.subjectToken) + fake.issuedAccessTokens.map(\.value)
                + [fake.awsSecretAccessKey, fake.awsSessionToken, host]
            let seen = agent.log + status.stdout + metrics + (try await agent.send("STATS").joined())
            for secret in secrets where !secret.isEmpty {
                #expect(!seen.contains(secret), "\(source): a secret in the log, status, metrics or STATS")
            }
            await agent.stop()
        }
        await fake.stop()
    }

    /// The credentials file is watched (`watch_config`); the subject token is not, and is read
    /// again at each exchange: a rotated token costs no reload, a changed credential source
    /// drops the host's tokens and exchanges again.
    @Test func aChangedCredentialSourceReloadsAndARotatedSubjectTokenDoesNot() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let text = directory.appendingPathComponent("token.txt").path
        try Data(fake.issueSubjectToken().utf8).write(to: URL(fileURLWithPath: text))
        let agent = try await Self.agent(
            fake,
            directory: directory,
            credentialSource: FakeGoogle.fileCredentialSource(path: text),
            configExtra: #", "watch_config": true, "watch_interval": 0.1"#
        )
        let vehicle = try #require(tokenOf(try await agent.send("GET vehicle v-1").first))
        #expect(fake.stsTokenCount == 1)

        // The platform rotates its token: not a reload; the tokens held stay.
        let rotated = fake.issueSubjectToken()
        try Data(rotated.utf8).write(to: URL(fileURLWithPath: text))
        try await Task.sleep(for: .milliseconds(500))  // five watch intervals: a reload would have come
        #expect((try await agent.stats())["reloads"] == 0)
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) == vehicle)

        // The credential source changes (a JSON token file now): the watcher reloads, the host's
        // tokens go, and the next exchange reads the new source.
        let json = directory.appendingPathComponent("token.json").path
        try Data(#"{"id_token": "\#(rotated)"}"#.utf8).write(to: URL(fileURLWithPath: json))
        try fake.externalAccountJSON(
            subjectTokenType: FakeGoogle.jwtTokenType,
            credentialSource: FakeGoogle.fileCredentialSource(path: json, jsonField: "id_token"),
            impersonate: Self.signer
        ).write(to: directory.appendingPathComponent("wif.json"))
        #expect(try await eventually { (try await agent.stats())["reloads"] == 1 }, "\(agent.log)")
        // (A token signed again within the same second is the same bytes: count the signatures.)
        #expect(fake.signatureCount == 1)
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) != nil)
        #expect(fake.signatureCount == 2, "the kind's tokens were dropped with the old identity")
        #expect(fake.stsTokenCount == 2)
        #expect(fake.stsRequests.last?.subjectToken == rotated)
        await agent.stop()
        await fake.stop()
    }

    @Test func aWrongAudienceIsNamedWithSTSsErrorAndNothingIsServed() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let text = directory.appendingPathComponent("token.txt").path
        try Data(fake.issueSubjectToken().utf8).write(to: URL(fileURLWithPath: text))
        let agent = try await Self.agent(
            fake,
            directory: directory,
            audience: "//iam.googleapis.com/projects/123456/locations/global/workloadIdentityPools/other/providers/p",
            credentialSource: FakeGoogle.fileCredentialSource(path: text)
        )
        let reply = try #require(try await agent.send("GET vehicle v-1").first)
        #expect(reply.hasPrefix("ERR unavailable"), "\(reply)")
        #expect(reply.contains("STS refused the exchange") && reply.contains("invalid_grant"), "\(reply)")
        #expect(reply.contains("does not match the expected audience"), "STS's own description: \(reply)")
        #expect(try await agent.send("GET access host").first?.hasPrefix("ERR unavailable") == true)
        #expect(fake.signatureCount == 0 && fake.generateAccessTokenCalls.isEmpty)
        let metrics = try await agent.metricsText()
        #expect(metrics.contains(#"fleet_tokend_sts_failures_total{reason="refused"}"#), "\(metrics)")
        #expect(metrics.contains(#"reason="sts""#), "the kind's failure reason is sts")
        await agent.stop()
        await fake.stop()
    }

    @Test func aMissingSubjectTokenFileIsNamed() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let missing = directory.appendingPathComponent("no-such-token").path
        let agent = try await Self.agent(
            fake,
            directory: directory,
            credentialSource: FakeGoogle.fileCredentialSource(path: missing)
        )
        let reply = try #require(try await agent.send("GET vehicle v-1").first)
        #expect(reply.contains("subject token: file \(missing) does not exist"), "\(reply)")
        #expect(fake.stsRequests.isEmpty)
        let metrics = try await agent.metricsText()
        #expect(metrics.contains(#"reason="subject_token""#), "\(metrics)")
        await agent.stop()
        await fake.stop()
    }

    @Test func anExecutableWithoutTheVariableIsRefusedAtStart() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let file = directory.appendingPathComponent("wif.json").path
        try fake.externalAccountJSON(
            subjectTokenType: FakeGoogle.idTokenType,
            credentialSource: FakeGoogle.executableCredentialSource(command: "/bin/true"),
            impersonate: Self.signer
        ).write(to: URL(fileURLWithPath: file))
        let result = try await run(
            AgentProcess.binary,
            ["check-config", "--config", try Self.config(fake, directory: directory)],
            environment: ProcessInfo.processInfo.environment.merging(
                Self.environment(credentials: file, directory: directory, extra: [:])
            ) { $1 }
        )
        #expect(result.status == 78, "\(result.stdout)\(result.stderr)")
        #expect(result.stderr.contains("set GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1"), "\(result.stderr)")
        // Allowed, it names the host identity, as status will.
        let allowed = try await run(
            AgentProcess.binary,
            ["check-config", "--config", try Self.config(fake, directory: directory)],
            environment: ProcessInfo.processInfo.environment.merging(
                Self.environment(
                    credentials: file,
                    directory: directory,
                    extra: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
                )
            ) { $1 }
        )
        #expect(allowed.status == 0, "\(allowed.stderr)")
        #expect(
            allowed.stdout.contains(
                "host identity: external_account (executable) via fleet-pool/fleet-provider, impersonating \(Self.signer)"
            ),
            "\(allowed.stdout)"
        )
        await fake.stop()
    }

    /// Google's own google-auth reads the files fake-google writes with the same
    /// `FakeGoogle.externalAccountJSON` and sources as the tests above, against the same fakes:
    /// STS takes its exchanges, and its AWS signature passes the fake's SigV4 check, as the
    /// agent's does.
    @Test func googleAuthAcceptsTheSameFilesAgainstTheSameFakes() async throws {
        _ = try await MetadataAgent.googleAuthPython()
        let script = DocText.root().appendingPathComponent("scripts/check-google-auth-federation").path
        let result = try await run(
            "/bin/bash",
            [script],
            environment: ProcessInfo.processInfo.environment.merging([
                "FAKE_GOOGLE_BINARY": FakeGoogleCommandTests.binary
            ]) {
                $1
            }
        )
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let lines = result.stdout.split(separator: "\n")
        for source in ["file-text", "file-json", "url", "aws", "executable"] {
            #expect(lines.contains { $0.hasPrefix("ok   \(source):") }, "\(source): \(result.stdout)")
        }
        #expect(lines.contains { $0.contains("SigV4 verified") }, "\(result.stdout)")
    }
}
