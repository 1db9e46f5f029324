import FakeGoogle
import FleetTokenClient
import Foundation
import TestSupport
import Testing

/// The agent signing key-less through IAM Credentials, against fakes of Google on loopback: the
/// real binary, the real socket, `fleet-tokend get`.
@Suite("Key-less issuers", .serialized)
struct KeylessIssuerTests {
    static let signer = FakeGoogle.defaultSigningAccount

    /// The environment of an agent that finds no credentials file, so it asks the metadata server
    /// at `metadataHost`.
    private static func environment(metadataHost: String, directory: URL) -> [String: String] {
        [
            "GOOGLE_APPLICATION_CREDENTIALS": "", "CREDENTIALS_DIRECTORY": "",
            "CLOUDSDK_CONFIG": directory.appendingPathComponent("no-gcloud").path, "GCE_METADATA_HOST": metadataHost,
        ]
    }

    /// A config with key-less `vehicle` and `server`, and the demo-free key-file `trip`.
    private static func config(_ fake: FakeGoogle, directory: URL, extra: String = "") async throws -> String {
        let key = try await KeyFile.make(email: "consumer@fake-project.iam.gserviceaccount.com", in: directory)
        let path = directory.appendingPathComponent("config.json").path
        let json = """
            {"issuers": {"vehicle": {"service_account": "\(signer)"},
                         "server": {"service_account": "\(signer)", "lifetime": 600},
                         "trip": {"key_file": "\(key)"}},
             "iam_endpoint": "\(fake.iamEndpoint)",
             "allow": {"server": {"users": [\(getuid())]}}\(extra)}
            """
        try Data(json.utf8).write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test func signsEachKindAsItsAccountAndAPermissionFaultIsTheOperatorsNotTheIDs() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let agent = try await AgentProcess(
            ["--config", try await Self.config(fake, directory: directory), "--degraded-after", "600"],
            environment: Self.environment(metadataHost: fake.metadataHost, directory: directory)
        )
        let vehicle = try #require(tokenOf(try await agent.send("GET vehicle v-1").first))
        let claims = try #require(fake.verify(vehicle, account: Self.signer), "signed by IAM as the account")
        #expect(claims["authorization"] as? [String: String] == ["vehicleid": "v-1"])
        let server = try #require(tokenOf(try await agent.send("GET server *").first))
        let serverClaims = try #require(fake.verify(server, account: Self.signer))
        #expect(serverClaims["authorization"] as? [String: String] == ["vehicleid": "*", "tripid": "*"])
        #expect((serverClaims["exp"] as? Int ?? 0) - (serverClaims["iat"] as? Int ?? 0) == 600)
        #expect(
            try await agent.send("GET server v-1").first?.hasPrefix("ERR bad-id kind server acts for the whole fleet")
                == true
        )
        #expect(try await agent.send("GET vehicle *").first?.hasPrefix("ERR bad-id") == true)
        #expect(fake.signatureCount == 2)
        // The same token through the client library and the command line.
        let client = FleetTokenClient(socketPath: agent.socketPath)
        #expect(try await client.token(.server).jwt == server)
        let cli = try await run(AgentProcess.binary, ["get", "--socket", agent.socketPath, "server", "*"])
        #expect(cli.status == 0 && cli.stdout.trimmingCharacters(in: .newlines) == server, "\(cli.stderr)")
        #expect(fake.signatureCount == 2)

        // The signer loses its permission: new ids answer unavailable with a retry hint, cached
        // ones are still served, the key-file kind is untouched, and the agent is degraded at once.
        fake.inject(.permissionDenied(.iamPermissionDenied), into: .iamCredentials, times: nil)
        let refused = try #require(try await agent.send("GET vehicle v-2").first)
        #expect(refused.hasPrefix("ERR unavailable IAM signJwt for \(Self.signer): HTTP 403 IAM_PERMISSION_DENIED"))
        #expect(refused.contains("roles/iam.serviceAccountTokenCreator"))
        #expect(refused.hasSuffix("retry after 30 s"))
        let calls = fake.signJwtCalls.count
        let again = try #require(try await agent.send("GET vehicle v-3").first)
        #expect(again.hasPrefix("ERR unavailable IAM signJwt"), "held, never rejected: \(again)")
        #expect(fake.signJwtCalls.count == calls, "held off without calling IAM")
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) == vehicle)
        #expect(tokenOf(try await agent.send("GET trip t-1").first) != nil)
        let get = try await run(AgentProcess.binary, ["get", "--socket", agent.socketPath, "vehicle", "v-4"])
        #expect(get.status == 69, "EX_UNAVAILABLE: \(get.stderr)")
        let status = try await run(AgentProcess.binary, ["status", "--socket", agent.socketPath])
        #expect(status.status != 0)
        #expect(status.stdout.contains("vehicle: signer or credentials need the operator"), "\(status.stdout)")
        let log = agent.log
        #expect(log.contains("key-less signing needs the operator"))
        #expect(log.contains("IAM_PERMISSION_DENIED"))
        for token in fake.issuedAccessTokens { #expect(!log.contains(token.value), "an access token in the log") }
        #expect(!log.contains(vehicle))

        // Fixed: after the hold, the kind signs again.
        fake.clearFaults()
        await agent.stop()
        await fake.stop()
    }

    /// Waits until the agent has applied `count` reloads.
    private func reloaded(_ agent: AgentProcess, count: Int) async -> Bool {
        for _ in 0..<200 {
            if let stats = try? await agent.stats(), (stats["reloads"] ?? 0) >= count { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    @Test func aReloadKeepsAnUnchangedIssuersTokensAndAccessTokenAndReplacesAChangedOne() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let config = try await Self.config(fake, directory: directory)
        let agent = try await AgentProcess(
            ["--config", config],
            environment: Self.environment(metadataHost: fake.metadataHost, directory: directory)
        )
        let vehicle = try #require(tokenOf(try await agent.send("GET vehicle v-1").first))
        let server = try #require(tokenOf(try await agent.send("GET server *").first))
        #expect(fake.metadataRequests.count == 1)

        // The same file again: nothing changes, no new access token, no new signature.
        kill(agent.pid, SIGHUP)
        #expect(await reloaded(agent, count: 1))
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) == vehicle)
        #expect(tokenOf(try await agent.send("GET server *").first) == server)
        #expect(fake.metadataRequests.count == 1)
        #expect(fake.signatureCount == 2)

        // server's lifetime changes: its token is signed again (with the same access token);
        // vehicle's is kept.
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try Data(text.replacingOccurrences(of: #""lifetime": 600"#, with: #""lifetime": 900"#).utf8)
            .write(to: URL(fileURLWithPath: config))
        kill(agent.pid, SIGHUP)
        #expect(await reloaded(agent, count: 2))
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) == vehicle)
        let resigned = try #require(tokenOf(try await agent.send("GET server *").first))
        #expect(resigned != server)
        let claims = try #require(fake.verify(resigned, account: Self.signer))
        #expect((claims["exp"] as? Int ?? 0) - (claims["iat"] as? Int ?? 0) == 900)
        #expect(fake.metadataRequests.count == 1, "the access token is kept across reloads")

        // A wildcard kind without its allow entry is refused on reload; the old configuration stays.
        try Data(
            try String(contentsOfFile: config, encoding: .utf8)
                .replacingOccurrences(of: #""allow": {"server": {"users": [\#(getuid())]}}"#, with: #""allow": {}"#)
                .utf8
        ).write(to: URL(fileURLWithPath: config))
        kill(agent.pid, SIGHUP)
        var refused = false
        for _ in 0..<200 where !refused {
            refused = agent.log.contains("reload refused") && agent.log.contains("allow.server")
            if !refused { try await Task.sleep(for: .milliseconds(50)) }
        }
        #expect(refused, "\(agent.log)")
        #expect(tokenOf(try await agent.send("GET server *").first) == resigned)
        await agent.stop()
        await fake.stop()
    }

    @Test func theSignatureBudgetHoldsAtTheFakeAndAGetPastItIsBusyWithARetryHint() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        // 6 a minute: a burst of one, then one every 10 s; a GET waits at most its 1 s time-out.
        let config = try await Self.config(fake, directory: directory)
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try Data(
            text.replacingOccurrences(
                of: #""vehicle": {"service_account": "\#(Self.signer)"}"#,
                with: #""vehicle": {"service_account": "\#(Self.signer)", "signs_per_minute": 6}"#
            ).utf8
        ).write(to: URL(fileURLWithPath: config))
        let agent = try await AgentProcess(
            ["--config", config, "--request-timeout", "1"],
            environment: Self.environment(metadataHost: fake.metadataHost, directory: directory)
        )
        #expect(tokenOf(try await agent.send("GET vehicle v-1").first) != nil)
        let busy = try #require(try await agent.send("GET vehicle v-2").first)
        #expect(busy.hasPrefix("ERR busy signature budget of kind vehicle spent; retry after "), "\(busy)")
        // WARM queues behind it without waiting; nothing more is signed within the budget's minute.
        #expect(try await agent.send("WARM vehicle w-1 w-2 v-1") == ["OK queued=2 cached=1"])
        let stats = try await agent.stats()
        #expect(stats["signs_vehicle"] == 1)
        #expect((stats["sign_timeouts_vehicle"] ?? 0) >= 1)
        #expect(fake.signatureCount == 1, "the budget holds at IAM itself")
        // The server kind has a budget of its own (the default), untouched by vehicle's.
        #expect(tokenOf(try await agent.send("GET server *").first) != nil)
        #expect(fake.signatureCount == 2)
        await agent.stop()
        await fake.stop()
    }

    @Test func aKindRunsAsManySignaturesAtOnceAsItsLaneAllowsNotEight() async throws {
        let fake = try await FakeGoogle.start()
        // Every signJwt is held until the test releases it (arrivals are recorded at once).
        fake.holdSignJwt()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let agent = try await AgentProcess(
            ["--config", try await Self.config(fake, directory: directory), "--max-concurrent-fetches", "16"],
            environment: Self.environment(metadataHost: fake.metadataHost, directory: directory)
        )
        let gets = (0..<16).map { index in Task { try await agent.send("GET vehicle c-\(index)") } }
        // All 16 reach IAM while none is answered: the HTTP client's pool is not the bound
        // (AsyncHTTPClient's default of 8 connections a host would hold the other 8 back).
        let arrived = await eventually(every: .milliseconds(50)) { fake.signJwtCalls.count >= 16 }
        #expect(arrived, "\(fake.signJwtCalls.count) signJwt calls in flight at once")
        fake.releaseSignJwt()
        for get in gets { #expect(tokenOf(try await get.value.first) != nil) }
        await agent.stop()
        await fake.stop()
    }

    @Test func theMetadataServerDownAtStartStopsOnlyTheKeylessKinds() async throws {
        let fake = try await FakeGoogle.start()
        fake.inject(.serverError(status: 503), into: .metadata, times: nil)
        let directory = try AgentProcess.makeTemporaryDirectory()
        let agent = try await AgentProcess(
            ["--config", try await Self.config(fake, directory: directory)],
            environment: Self.environment(metadataHost: fake.metadataHost, directory: directory)
        )
        let reply = try #require(try await agent.send("GET vehicle v-1").first)
        #expect(reply.hasPrefix("ERR unavailable host credentials:"), "\(reply)")
        #expect(tokenOf(try await agent.send("GET trip t-1").first) != nil)
        fake.clearFaults()
        await agent.stop()
        await fake.stop()
    }

    @Test func anADCFileAsASystemdCredentialAuthorizesAndOtherTypesStopTheStart() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try AgentProcess.makeTemporaryDirectory()
        let credentials = directory.appendingPathComponent("credentials")
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: true)
        try fake.authorizedUserJSON(tokenURI: fake.tokenURI, quotaProject: "billing-project")
            .write(to: credentials.appendingPathComponent("google-application-credentials"))
        var environment = Self.environment(metadataHost: "127.0.0.1:1", directory: directory)
        environment["CREDENTIALS_DIRECTORY"] = credentials.path
        let config = try await Self.config(fake, directory: directory)
        let agent = try await AgentProcess(["--config", config], environment: environment)
        let token = try #require(tokenOf(try await agent.send("GET vehicle v-1").first))
        #expect(fake.verify(token, account: Self.signer) != nil)
        #expect(fake.tokenRequests.count == 1)
        #expect(fake.metadataRequests.isEmpty)
        #expect(fake.signJwtCalls.last?.userProject == "billing-project")
        await agent.stop()

        try Data(#"{"type": "impersonated_service_account", "audience": "x"}"#.utf8)
            .write(to: credentials.appendingPathComponent("google-application-credentials"))
        let refused = try await run(
            AgentProcess.binary,
            ["serve", "--config", config, "--socket", directory.appendingPathComponent("x.sock").path],
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }
        )
        #expect(refused.status == 78)
        #expect(refused.stderr.contains("impersonated_service_account"), "\(refused.stderr)")
        await fake.stop()
    }
}

/// A service-account key file made for a test.
enum KeyFile {
    /// Writes a key file for `email` (a new RSA key from openssl, made off the pool) into
    /// `directory`; returns its path.
    static func make(email: String, in directory: URL) async throws -> String {
        let path = directory.appendingPathComponent("\(email).json").path
        let openssl = try #require(which("openssl"), "openssl must be installed (scripts/test installs it)")
        let key = try await run(openssl, ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"]).stdout
        let json: [String: String] = [
            "type": "service_account", "private_key": key, "private_key_id": "kid-file", "client_email": email,
        ]
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
        return path
    }
}
