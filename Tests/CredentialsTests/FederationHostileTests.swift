import FakeGoogle
import Foundation
import TestSupport
import Testing

@testable import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// The federated host identity against a hostile or broken platform: an AWS environment or
/// instance metadata that names what is no region or role, STS replies no token can be read
/// from, a token source that drips, and executables that print forever or outlive their fetch.
@Suite("Federation: a hostile platform")
struct FederationHostileTests {
    /// A secret access key as an instance role's credentials hold it.
    static let secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"

    /// Runs `body` with a source of an `external_account` file (no impersonation) of
    /// `credentialSource`, shut down after.
    private func withSource(
        _ fake: FakeGoogle,
        tokenType: String,
        credentialSource: [String: Any],
        environment: [String: String] = [:],
        tuning: HostAccessTokenSource.Tuning = fastTuning,
        _ body: (HostAccessTokenSource) async throws -> Void
    ) async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let path = try directory.write(
            "wif.json",
            fake.externalAccountJSON(subjectTokenType: tokenType, credentialSource: credentialSource, impersonate: nil)
        )
        let source = try HostCredentials.source(
            for: .file(path: path, via: "test"),
            environment: environment,
            tuning: tuning
        )
        do {
            try await body(source)
        } catch {
            await source.shutdown()
            throw error
        }
        await source.shutdown()
    }

    /// The error of a fetch that must fail (`nil` when it served a token).
    private func failure(_ source: HostAccessTokenSource) async -> CredentialsError? {
        do {
            _ = try await source.accessToken()
            return nil
        } catch {
            return error
        }
    }

    // MARK: AWS

    @Test(arguments: ["us-east-1.evil.com", "us east 1", "evil.com/x?", "US-EAST-1", "-east", "e\u{301}u-west-1"])
    func anAWSRegionFromTheEnvironmentMustBeARegionName(region: String) async throws {
        try await withFake { fake in
            let keys = fake.addAWSAccessKey()
            for name in ["AWS_REGION", "AWS_DEFAULT_REGION"] {
                try await withSource(
                    fake,
                    tokenType: FakeGoogle.awsTokenType,
                    credentialSource: fake.awsCredentialSource(imdsv2: true),
                    environment: [
                        name: region, "AWS_ACCESS_KEY_ID": keys.accessKeyID,
                        "AWS_SECRET_ACCESS_KEY": keys.secretAccessKey,
                    ]
                ) { source in
                    let error = try #require(await failure(source), "served with region \(region)")
                    #expect(error.fault == .credentials)
                    #expect(error.message.contains("\(name) \""), "\(error.message)")
                    #expect(error.message.contains("is not a region name"), "\(error.message)")
                    #expect(!error.message.contains(keys.secretAccessKey))
                }
            }
            #expect(fake.stsRequests.isEmpty, "a request signed for another host went to STS")
            #expect(fake.awsMetadataRequests.isEmpty)
        }
    }

    @Test func anInstanceRoleNameOtherThanAnIAMNameIsNotFollowed() async throws {
        try await withFake { fake in
            let document = #"{"Code":"Success","AccessKeyId":"ASIAFAKE","SecretAccessKey":"\#(Self.secret)"}"#
            let roles = [
                "..", ".", "role?Action=List", "role#x", "r%2e%2e", "a\\b", document, String(repeating: "r", count: 65),
            ]
            for role in roles {
                fake.setAWSRoleName(role)
                try await withSource(
                    fake,
                    tokenType: FakeGoogle.awsTokenType,
                    credentialSource: fake.awsCredentialSource(imdsv2: true)
                ) { source in
                    let error = try #require(await failure(source), "served with role \(role)")
                    #expect(error.message.contains("is not an IAM role name"), "\(role): \(error.message)")
                    #expect(!error.message.contains(Self.secret), "\(error.message)")
                }
            }
            let credentials = "/latest/meta-data/iam/security-credentials/"
            let followed = fake.awsMetadataRequests.filter { $0.path.hasPrefix(credentials) }.map(\.path)
            #expect(followed.isEmpty, "\(followed)")
            #expect(fake.stsRequests.isEmpty)
            // A name of IAM's characters is followed.
            fake.setAWSRoleName("fleet+agent=1,x.y@z_w-v")
            try await withSource(
                fake,
                tokenType: FakeGoogle.awsTokenType,
                credentialSource: fake.awsCredentialSource(imdsv2: true)
            ) { source in _ = try await source.accessToken() }
        }
    }

    @Test func aRegionURLAnsweringSomethingElseIsNotRepeated() async throws {
        try await withFake { fake in
            // region_url pointed at the role's credentials: the answer is no zone, and its
            // secret is not repeated in the error.
            fake.setAWSRegion(#"{"AccessKeyId":"ASIAFAKE","SecretAccessKey":"\#(Self.secret)","Token":"t"}"#)
            try await withSource(
                fake,
                tokenType: FakeGoogle.awsTokenType,
                credentialSource: fake.awsCredentialSource(imdsv2: true)
            ) { source in
                let error = try #require(await failure(source))
                #expect(error.message.contains("is not an availability zone"), "\(error.message)")
                #expect(error.message.contains("a reply of "), "\(error.message)")
                #expect(!error.message.contains(Self.secret), "\(error.message)")
            }
            // A short wrong answer is shown, and not taken.
            fake.setAWSRegion("us-east-1.evil.com")
            try await withSource(
                fake,
                tokenType: FakeGoogle.awsTokenType,
                credentialSource: fake.awsCredentialSource(imdsv2: true)
            ) { source in
                let error = try #require(await failure(source))
                #expect(
                    error.message.contains("\"us-east-1.evil.coma\" is not an availability zone"),
                    "\(error.message)"
                )
            }
            #expect(fake.stsRequests.isEmpty)
        }
    }

    // MARK: STS

    @Test func stsRepliesWithoutAUsableTokenFailWithoutRepeatingIt() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let file = try directory.write("token", Data((fake.issueSubjectToken() + "\r\n").utf8))
            let secret = "ya29.federated-secret"
            let bodies = [
                #"{"access_token":"\#(secret)\r\nX-Evil: 1","expires_in":3600,"token_type":"Bearer"}"#,
                #"{"access_token":"\#(secret) x","expires_in":3600}"#,
                #"{"access_token":"\#(secret)","expires_in":0}"#,
                #"{"access_token":"\#(secret)","expires_in":-1}"#,
                #"{"access_token":"\#(secret)","expires_in":"NaN"}"#,
                #"{"access_token":"\#(secret)","expires_in":"inf"}"#,
                #"{"access_token":"\#(secret)","expires_in":1e999}"#,
                #"{"access_token":"\#(secret)","expires_in":"an hour"}"#,
                #"{"access_token":"\#(secret)","expires_in":true}"#,
                #"{"access_token":"\#(secret)","access_token":"\#(secret)","expires_in":3600}"#,
                #"{"access_token":"\#(secret)","expires_in":3600,"token_type":"MAC"}"#,
                "<html>\(secret)</html>", "",
                #"{"access_token":"\#(secret)","expires_in":3600,"pad":""#
                    + String(repeating: "x", count: FederationHTTP.maxBodyBytes) + #""}"#,
            ]
            for body in bodies {
                try await withSource(
                    fake,
                    tokenType: FakeGoogle.jwtTokenType,
                    credentialSource: FakeGoogle.fileCredentialSource(path: file)
                ) { source in
                    fake.inject(.raw(status: 200, body: Array(body.utf8)), into: .sts, times: 1)
                    let error = try #require(await failure(source), "served \(body.prefix(80))")
                    #expect(error.fault == .transient, "\(error.message)")
                    #expect(!error.message.contains(secret), "\(error.message)")
                }
            }
            #expect(fake.stsRequests.count == bodies.count)
        }
    }

    @Test func aDrippingTokenSourceEndsWithinTheFetchsTime() async throws {
        try await withFake { fake in
            fake.registerAzureResource(FakeGoogle.azureDefaultResource)
            fake.inject(.drip(intervalMilliseconds: 500), into: .azureMetadata)
            try await withSource(
                fake,
                tokenType: FakeGoogle.jwtTokenType,
                credentialSource: fake.azureCredentialSource(),
                tuning: HostAccessTokenSource.Tuning(connectTimeout: 10, timeout: 1)
            ) { source in
                let error = try #require(await failure(source))
                #expect(error.message.hasPrefix("subject token: credential source url"), "\(error.message)")
                // The source's own call ended it, at its 1 s deadline: in the body as a rule, in the
                // head when a loaded machine keeps the fake from sending even that in time (seen in
                // a full run beside a build). Never the whole fetch's deadline.
                let ownDeadline =
                    error.message.contains("reading the reply timed out after 1 s")
                    || error.message.hasSuffix("request failed: Deadline exceeded")
                #expect(ownDeadline, "\(error.message)")
                #expect(!error.message.contains("timed out after 4"), "\(error.message)")
            }
            #expect(fake.stsRequests.isEmpty)
        }
    }

    // MARK: Executables

    /// Writes `script` to `directory` and gives an executable source that runs it with `/bin/sh`.
    private func executable(
        _ script: String,
        in directory: TemporaryDirectory,
        timeoutMillis: Int = 30_000,
        outputFile: String? = nil
    ) throws -> [String: Any] {
        let path = try directory.write("run-\(UUID().uuidString).sh", Data(("#!/bin/sh\n" + script).utf8))
        return FakeGoogle.executableCredentialSource(
            command: "/bin/sh \(path)",
            timeoutMillis: timeoutMillis,
            outputFile: outputFile
        )
    }

    @Test func executablesThatPrintTooMuchOrNothingFailAtOnce() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let fifo = directory.path + "/output.fifo"
            #expect(mkfifo(fifo, 0o600) == 0)
            let cases: [(script: String, outputFile: String?, says: String)] = [
                ("while :; do echo 0123456789abcdef; done\n", nil, "printed over 64 KiB"),
                ("head -c \(ExecutableSource.maxOutputBytes + 1) /dev/zero\n", nil, "printed over 64 KiB"),
                ("exit 0\n", nil, "is not a JSON object"),
                ("printf '\\0\\0\\r\\n'\n", nil, "is not a JSON object"),
                ("exit 0\n", fifo, "is not a JSON object"),
                ("echo '{\"version\":1,\"success\":true}'; exit 3\n", nil, "exited with status 3"),
            ]
            for (script, outputFile, says) in cases {
                try await withSource(
                    fake,
                    tokenType: FakeGoogle.idTokenType,
                    credentialSource: try executable(script, in: directory, outputFile: outputFile),
                    environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
                ) { source in
                    let start = ContinuousClock.now
                    let error = try #require(await failure(source))
                    #expect(error.message.contains(says), "\(script): \(error.message)")
                    // Its output ended it, not its 30 s time-out.
                    #expect(ContinuousClock.now - start < .seconds(20), "\(script)")
                }
            }
            #expect(fake.stsRequests.isEmpty)
        }
    }

    @Test func aFetchShutDownKillsTheExecutablesProcessGroup() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let pids = directory.path + "/pids"
            // It ignores SIGTERM, and its child holds its standard output.
            let script = "trap '' TERM\nsleep 300 &\necho $$ $! > \(pids).tmp\nmv \(pids).tmp \(pids)\nsleep 300\n"
            try await withSource(
                fake,
                tokenType: FakeGoogle.idTokenType,
                credentialSource: try executable(script, in: directory),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            ) { source in
                let fetch = Task { await failure(source) }
                var written: String?
                for _ in 0..<500 where written == nil {
                    written = try? String(contentsOfFile: pids, encoding: .utf8)
                    if written == nil { try await Task.sleep(for: .milliseconds(20)) }
                }
                let numbers = try #require(written).split(separator: " ").compactMap {
                    pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines))
                }
                try #require(numbers.count == 2)
                await source.shutdown()
                #expect(await fetch.value != nil, "the fetch shut down served a token")
                // Both went with the fetch, long before the executable's own 30 s time-out.
                var alive = numbers
                for _ in 0..<250 where !alive.isEmpty {
                    alive = alive.filter { pid in
                        kill(pid, 0) == 0
                            && (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.contains(") Z ")
                                != true
                    }
                    if !alive.isEmpty { try await Task.sleep(for: .milliseconds(20)) }
                }
                #expect(alive.isEmpty, "outlived their fetch: \(alive)")
            }
        }
    }
}
