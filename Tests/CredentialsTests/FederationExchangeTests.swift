import FakeGoogle
import Foundation
import TestSupport
import Testing

@testable import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// The federated host identity's exchange against the fake Google: STS's back-off, its replies,
/// impersonation faults, and executables run as Google's pluggable auth runs them. The scripts
/// run as `/bin/sh <script>`: a script this process just wrote may not be executed itself while
/// a program another test started at that moment still holds it open for writing (ETXTBSY).
@Suite("Federation: the exchange")
struct FederationExchangeTests {
    static let signer = FakeGoogle.defaultSigningAccount

    /// Writes an `external_account` file for `source` in `directory` and makes its source.
    private func source(
        _ fake: FakeGoogle,
        directory: TemporaryDirectory,
        tokenType: String = FakeGoogle.jwtTokenType,
        credentialSource: [String: Any],
        impersonate: String? = signer,
        clientSecret: String? = nil,
        environment: [String: String] = [:],
        clock: any AgentClock = SystemAgentClock()
    ) throws -> HostAccessTokenSource {
        let path = try directory.write(
            "wif.json",
            fake.externalAccountJSON(
                subjectTokenType: tokenType,
                credentialSource: credentialSource,
                impersonate: impersonate,
                clientID: clientSecret == nil ? nil : "sts-client",
                clientSecret: clientSecret
            )
        )
        return try HostCredentials.source(
            for: .file(path: path, via: "test"),
            environment: environment,
            tuning: fastTuning,
            clock: clock
        )
    }

    private func tokenFile(_ fake: FakeGoogle, _ directory: TemporaryDirectory) throws -> String {
        try directory.write("token", Data(fake.issueSubjectToken().utf8))
    }

    /// Runs `body` with a fake and a source whose subject token is a file of a token the fake
    /// issued, shutting both down after.
    private func withTokenFileSource(
        clock: any AgentClock = SystemAgentClock(),
        impersonate: String? = signer,
        clientSecret: String? = nil,
        _ body: (FakeGoogle, HostAccessTokenSource) async throws -> Void
    ) async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            fake.stampExpireTimes { clock.wallSeconds }
            let source = try source(
                fake,
                directory: directory,
                credentialSource: FakeGoogle.fileCredentialSource(path: try tokenFile(fake, directory)),
                impersonate: impersonate,
                clientSecret: clientSecret,
                clock: clock
            )
            do {
                try await body(fake, source)
            } catch {
                await source.shutdown()
                throw error
            }
            await source.shutdown()
        }
    }

    @Test func stsBacksOffAfterA503AndAsksAgainOnlyAfterIt() async throws {
        let clock = HeldClock()
        try await withTokenFileSource(clock: clock) { fake, source in
            fake.inject(.serverError(status: 503), into: .sts, times: 1)
            await #expect(throws: CredentialsError.self) { try await source.accessToken() }
            #expect(fake.stsRequests.count == 1)
            // Within the back-off: refused at once, STS not asked.
            do throws(CredentialsError) {
                _ = try await source.accessToken()
                Issue.record("served within the back-off")
            } catch {
                #expect(error.message.contains("backing off"), "\(error.message)")
                #expect(error.fault == .transient)
            }
            #expect(fake.stsRequests.count == 1)
            clock.advance(1.5)
            _ = try await source.accessToken()
            #expect(fake.stsTokenCount == 1 && fake.stsRequests.count == 2)
            let counts = try #require(source.federationStatistics)
            #expect(counts.stsCalls == 2 && counts.stsBackoffs == 1)
            #expect(counts.stsFailures[.unavailable] == 1)
            #expect(counts.impersonationCalls == 1)
        }
    }

    @Test func aRetryAfterSetsTheBackOff() async throws {
        let clock = HeldClock()
        try await withTokenFileSource(clock: clock) { fake, source in
            fake.inject(.tooManyRequests(retryAfterSeconds: 30), into: .sts, times: 1)
            await #expect(throws: CredentialsError.self) { try await source.accessToken() }
            clock.advance(20)
            await #expect(throws: CredentialsError.self) { try await source.accessToken() }
            #expect(fake.stsRequests.count == 1)
            clock.advance(11)
            _ = try await source.accessToken()
            #expect(source.federationStatistics?.stsFailures[.throttled] == 1)
        }
    }

    @Test func aStringExpiresInClientAuthenticationAndNoImpersonation() async throws {
        try await withTokenFileSource(impersonate: nil, clientSecret: "sts-secret") { fake, source in
            fake.stsExpiresInAsString = true
            let token = try await source.accessToken()
            #expect(fake.stsRequests.first?.clientID == "sts-client")
            #expect(fake.stsRequests.first?.issued == token.value, "without impersonation, the federated token")
            #expect(fake.generateAccessTokenCalls.isEmpty)
            #expect(token.expiresAt.seconds > Date().timeIntervalSince1970 + 3000)
        }
    }

    /// A hostile STS that echoes what it was sent gets its error text withheld, not repeated.
    @Test func anSTSErrorThatEchoesTheSubjectTokenIsWithheld() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        try await withFake { fake in
            let token = fake.issueSubjectToken()
            let path = try directory.write("token", Data(token.utf8))
            let echo = #"{"error": "invalid_grant", "error_description": "Invalid token \#(token.prefix(120))"}"#
            fake.inject(.raw(status: 400, body: Array(echo.utf8), headers: [:]), into: .sts, times: 1)
            let source = try source(
                fake,
                directory: directory,
                credentialSource: FakeGoogle.fileCredentialSource(path: path)
            )
            do throws(CredentialsError) {
                _ = try await source.accessToken()
                Issue.record("served")
            } catch {
                #expect(
                    error.message.contains("error text withheld: it repeats part of the token sent"),
                    "\(error.message)"
                )
                #expect(!error.message.contains(String(token.prefix(40))), "\(error.message)")
            }
            await source.shutdown()
        }
    }

    @Test func awsWithoutARegionOrKeysSaysWhatToSet() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            for (missing, expected) in [
                (
                    "region_url",
                    "aws: no region: set AWS_REGION (or AWS_DEFAULT_REGION) or give credential_source.region_url"
                ),
                ("url", "aws: no keys: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or give credential_source.url"),
            ] {
                var credentialSource = fake.awsCredentialSource(imdsv2: true)
                credentialSource[missing] = nil
                let source = try source(
                    fake,
                    directory: directory,
                    tokenType: FakeGoogle.awsTokenType,
                    credentialSource: credentialSource
                )
                do throws(CredentialsError) {
                    _ = try await source.accessToken()
                    Issue.record("served without \(missing)")
                } catch {
                    #expect(error.message == "subject token: " + expected, "\(error.message)")
                    #expect(error.fault == .credentials)
                }
                await source.shutdown()
            }
            #expect(fake.stsRequests.isEmpty && fake.awsMetadataRequests.isEmpty, "nothing asked before the check")
        }
    }

    @Test func anImpersonationRefusalNamesThePermissionAndTheAccount() async throws {
        try await withTokenFileSource { fake, source in
            fake.inject(.permissionDenied(.iamPermissionDenied), into: .generateAccessToken, times: 1)
            do throws(CredentialsError) {
                _ = try await source.accessToken()
                Issue.record("served")
            } catch {
                #expect(error.fault == .credentials)
                #expect(error.message.contains("impersonating \(Self.signer): HTTP 403"), "\(error.message)")
                #expect(error.message.contains("roles/iam.workloadIdentityUser"))
            }
            // The federated token is kept: the next try impersonates without asking STS again.
            _ = try await source.accessToken()
            #expect(fake.stsRequests.count == 1 && fake.generateAccessTokenCalls.count == 2)
        }
    }

    @Test func anExecutableAnsweringFailureGivesItsCodeAndMessage() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let script = try directory.write(
                "fail.sh",
                Data(
                    #"""
                    #!/bin/sh
                    echo '{"version": 1, "success": false, "code": "401", "message": "Caller not authorized."}'
                    """#.utf8
                )
            )
            chmod(script, 0o755)
            let source = try source(
                fake,
                directory: directory,
                tokenType: FakeGoogle.idTokenType,
                credentialSource: FakeGoogle.executableCredentialSource(command: "/bin/sh \(script)"),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            )
            defer { Task { await source.shutdown() } }
            do throws(CredentialsError) {
                _ = try await source.accessToken()
                Issue.record("served")
            } catch {
                #expect(
                    error.message
                        == "subject token: executable \"/bin/sh\" answered success false: code \"401\", message "
                        + "\"Caller not authorized.\"",
                    "\(error.message)"
                )
            }
            #expect(fake.stsRequests.isEmpty)
        }
    }

    @Test func anExecutableSeesOnlyGooglesVariablesAndItsOutputFileIsReused() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let token = fake.issueSubjectToken()
            let output = directory.path + "/output.json"
            let runs = directory.path + "/runs"
            let seen = directory.path + "/environment"
            let response = String(
                decoding: FakeGoogle.executableResponse(token: token, expiresAt: Date().addingTimeInterval(3600)),
                as: UTF8.self
            )
            let script = try directory.write(
                "get.sh",
                Data(
                    """
                    #!/bin/sh
                    echo run >> \(runs)
                    env | sort > \(seen)
                    echo '\(response)' > "$GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE"
                    cat "$GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE"
                    """.utf8
                )
            )
            chmod(script, 0o755)
            let source = try source(
                fake,
                directory: directory,
                tokenType: FakeGoogle.idTokenType,
                credentialSource: FakeGoogle.executableCredentialSource(
                    command: "/bin/sh \(script)",
                    outputFile: output
                ),
                environment: [
                    "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1", "PATH": "/usr/bin:/bin",
                    "AWS_SECRET_ACCESS_KEY": "agent-only", "HOME": "/root",
                ]
            )
            defer { Task { await source.shutdown() } }
            let first = try await source.accessToken()
            source.invalidate(first)
            // IAM refuses the federated token the exchange kept: it is dropped, and the next
            // fetch asks STS again, with the subject token from the output file.
            fake.expireAccessTokens()
            _ = try? await source.accessToken()
            _ = try await source.accessToken()
            #expect(fake.stsTokenCount == 2)
            let variables = try String(contentsOfFile: seen, encoding: .utf8)
            let names = Set(
                variables.split(separator: "\n").compactMap { $0.split(separator: "=").first.map(String.init) }
            )
            #expect(
                names.isSubset(of: [
                    "PATH", "PWD", "SHLVL", "_", "GOOGLE_EXTERNAL_ACCOUNT_AUDIENCE",
                    "GOOGLE_EXTERNAL_ACCOUNT_TOKEN_TYPE",
                    "GOOGLE_EXTERNAL_ACCOUNT_INTERACTIVE", "GOOGLE_EXTERNAL_ACCOUNT_IMPERSONATED_EMAIL",
                    "GOOGLE_EXTERNAL_ACCOUNT_OUTPUT_FILE",
                ]),
                "\(names)"
            )
            #expect(variables.contains("GOOGLE_EXTERNAL_ACCOUNT_INTERACTIVE=0"))
            #expect(variables.contains("GOOGLE_EXTERNAL_ACCOUNT_IMPERSONATED_EMAIL=\(Self.signer)"))
            #expect(!variables.contains("agent-only"))
            #expect(try String(contentsOfFile: runs, encoding: .utf8) == "run\n", "the output file was used again")
            #expect(fake.stsRequests.allSatisfy { $0.subjectToken == token })
        }
    }

    @Test func anExecutablePastItsTimeOutIsKilledWithItsProcessGroup() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let child = directory.path + "/child.pid"
            let script = try directory.write(
                "hang.sh",
                Data(
                    """
                    #!/bin/sh
                    sleep 300 &
                    echo $! > \(child)
                    sleep 300
                    """.utf8
                )
            )
            chmod(script, 0o755)
            let source = try source(
                fake,
                directory: directory,
                tokenType: FakeGoogle.idTokenType,
                credentialSource: FakeGoogle.executableCredentialSource(
                    command: "/bin/sh \(script)",
                    timeoutMillis: 5000
                ),
                environment: ["GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES": "1"]
            )
            defer { Task { await source.shutdown() } }
            do throws(CredentialsError) {
                _ = try await source.accessToken()
                Issue.record("served")
            } catch {
                #expect(error.message.contains("timed out after 5000 ms"), "\(error.message)")
                #expect(error.message.contains("process group was killed"))
            }
            let pid = try #require(
                Int32(
                    try String(contentsOfFile: child, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
                )
            )
            // Its child went with it (reaped by init once killed: give that a moment).
            var gone = false
            for _ in 0..<100 {
                if kill(pid, 0) != 0
                    || (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8))?.contains(") Z ") == true
                {
                    gone = true
                    break
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(gone, "the executable's child outlived its time-out")
            #expect(fake.stsRequests.isEmpty)
        }
    }
}
