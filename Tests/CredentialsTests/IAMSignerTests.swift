import FakeGoogle
import Foundation
import Logging
import TestSupport
import Testing
import TokenAgent

/// The key-less issuer against fakes of the metadata server, the OAuth token endpoint and IAM
/// Credentials on loopback: every minted token verified with the fake's key, and each signer fault.
@Suite("IAM signer")
struct IAMSignerTests {
    static let account = FakeGoogle.defaultSigningAccount

    /// A fake, and a signer for `account` whose access tokens come from the fake's metadata server.
    private func makeSigner(
        _ fake: FakeGoogle,
        account: String = IAMSignerTests.account,
        claims: IssuerClaims = IssuerClaims(),
        lifetime: Double = 1800,
        timeout: Double = 10,
        credentials: (any AccessTokenSource)? = nil
    ) throws -> (IAMSigner, any AccessTokenSource) {
        let source = try credentials ?? HostCredentials.source(for: .metadataServer(host: fake.metadataHost))
        let signer = IAMSigner(
            account: account,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            claims: claims,
            lifetime: lifetime,
            credentials: source,
            connectTimeout: 10,  // loopback, but a loaded full run can be slow to accept
            timeout: timeout
        )
        return (signer, source)
    }

    private func shutdown(_ signer: IAMSigner, _ source: any AccessTokenSource, _ fake: FakeGoogle) async {
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }

    /// The provider error `body` throws; records an issue when it throws none or another.
    private func failure(_ body: () async throws -> FetchedToken) async -> ProviderError? {
        do {
            let token = try await body()
            Issue.record("expected a failure, got a token expiring at \(token.expiresAt.seconds)")
            return nil
        } catch let error as ProviderError {
            return error
        } catch {
            Issue.record("not a ProviderError: \(error)")
            return nil
        }
    }

    @Test func everyKindsTokenIsSignedByGoogleAsTheAccountWithItsClaims() async throws {
        let fake = try await FakeGoogle.start()
        let claims = IssuerClaims(
            claimNames: FleetEngineKinds.claimNames.merging(["trusted": "deliveryvehicleid"]) { $1 }
        )
        let (signer, source) = try makeSigner(fake, claims: claims)
        let cases: [(String, String, [String: String])] = [
            ("vehicle", "v-1", ["vehicleid": "v-1"]),
            ("trip", "t-1", ["tripid": "t-1"]),
            ("delivery-vehicle", "d-1", ["deliveryvehicleid": "d-1"]),
            ("task", "k-1", ["taskid": "k-1"]),
            ("tracking", "r-1", ["trackingid": "r-1"]),
            ("trusted", "d-2", ["deliveryvehicleid": "d-2"]),
            ("server", "*", ["vehicleid": "*", "tripid": "*"]),
            ("delivery-server", "*", ["deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]),
            (
                "fleet-reader", "*",
                ["vehicleid": "*", "tripid": "*", "deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]
            ),
            ("delivery-fleet-reader", "*", ["deliveryvehicleid": "*", "taskid": "*", "trackingid": "*"]),
        ]
        for (kind, id, authorization) in cases {
            let before = Int(Date().timeIntervalSince1970)
            let fetched = try await signer.fetchToken(for: TokenKey(kind: kind, id: id))
            let verified = try #require(fake.verify(fetched.token, account: Self.account), "\(kind): signature")
            #expect(verified["iss"] as? String == Self.account)
            #expect(verified["sub"] as? String == Self.account)
            #expect(verified["aud"] as? String == "https://fleetengine.googleapis.com/")
            let iat = try #require(verified["iat"] as? Int)
            #expect(iat >= before - 1 && iat <= before + 2)
            #expect(verified["exp"] as? Int == iat + 1800)
            #expect(verified["authorization"] as? [String: String] == authorization, "\(kind)")
            #expect(Int(fetched.expiresAt.seconds) == iat + 1800)
        }
        // One access token from the metadata server for all ten signatures, each with it.
        #expect(fake.metadataRequests.count == 1)
        #expect(fake.signatureCount == cases.count)
        let issued = try #require(fake.issuedAccessTokens.first?.value)
        #expect(fake.signJwtCalls.allSatisfy { $0.accessToken == issued })
        await shutdown(signer, source, fake)
    }

    @Test func neverSignsAStarForAPerIDKindNorAnIDForAWildcardKind() async throws {
        let fake = try await FakeGoogle.start()
        let (signer, source) = try makeSigner(fake)
        for (kind, id) in [("vehicle", "*"), ("trip", ".."), ("server", "v-1"), ("unknown", "x")] {
            let error = await failure { try await signer.fetchToken(for: TokenKey(kind: kind, id: id)) }
            guard case .rejected = error else {
                Issue.record("\(kind) \(id): \(String(describing: error))")
                continue
            }
        }
        #expect(fake.signJwtCalls.isEmpty)
        await shutdown(signer, source, fake)
    }

    @Test func a401RefreshesTheAccessTokenOnceAndAnExpiredOneIsReplaced() async throws {
        let fake = try await FakeGoogle.start()
        let (signer, source) = try makeSigner(fake)
        fake.inject(.unauthorized, into: .iamCredentials, times: 1)
        _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
        #expect(fake.metadataRequests.count == 2, "a new access token after the 401")
        #expect(fake.signJwtCalls.map(\.status) == [401, 200])

        // An access token the API says has expired (before its expires_in) is replaced likewise.
        fake.expireAccessTokens()
        _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-2"))
        #expect(fake.metadataRequests.count == 3)
        #expect(fake.signJwtCalls.map(\.status) == [401, 200, 401, 200])

        // 401 with a fresh token too: the credentials are the operator's to fix.
        fake.inject(.unauthorized, into: .iamCredentials, times: 2)
        let error = await failure { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-3")) }
        guard case .misconfigured(let text, let retryAfter) = error else {
            Issue.record("\(String(describing: error))")
            return
        }
        #expect(text.contains("HTTP 401 twice"))
        #expect(retryAfter == signer.faultHold)
        await shutdown(signer, source, fake)
    }

    @Test func eachPermissionFaultNamesItsFixAndHoldsTheKindOffWithoutCallingIAM() async throws {
        let fixes: [(FakeGoogleFault, String)] = [
            (.permissionDenied(.iamPermissionDenied), "roles/iam.serviceAccountTokenCreator on \(Self.account)"),
            (.permissionDenied(.serviceDisabled), "enable iamcredentials.googleapis.com"),
            (.permissionDenied(.accessTokenScopeInsufficient), "access scopes lack cloud-platform"),
            (.notFound, "no such service account \(Self.account)"),
            (.badRequest, "report this as a bug"),
        ]
        for (fault, fix) in fixes {
            let fake = try await FakeGoogle.start()
            let (signer, source) = try makeSigner(fake)
            fake.inject(fault, into: .iamCredentials, times: 1)
            let error = await failure { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1")) }
            guard case .misconfigured(let text, let retryAfter) = error else {
                Issue.record("\(fault): \(String(describing: error))")
                continue
            }
            #expect(text.contains(fix), "\(fault): \(text)")
            #expect(retryAfter == 30)
            #expect(FetchFailureReason(error!) == .misconfigured)
            // Held: another id fails at once, IAM is not asked again.
            let calls = fake.signJwtCalls.count
            let again = await failure { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-2")) }
            guard case .misconfigured(let heldText, let left) = again else {
                Issue.record("\(fault) held: \(String(describing: again))")
                continue
            }
            #expect(heldText == text)
            #expect(left > 0 && left <= 30)
            #expect(fake.signJwtCalls.count == calls)
            await shutdown(signer, source, fake)
        }
    }

    @Test func passingFaultsFailOrThrottleAndAreNeverTheOperators() async throws {
        let fake = try await FakeGoogle.start()
        // The loopback fake answers within the signer's usual 10 s however loaded the machine;
        // only the hang below is timed, on a signer of its own with a 1 s time-out.
        let (signer, source) = try makeSigner(fake)
        fake.inject(.tooManyRequests(retryAfterSeconds: 7), into: .iamCredentials)
        let throttled = await failure { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1")) }
        #expect(throttled == .throttled("IAM signJwt HTTP 429", retryAfter: 7))
        fake.inject(.serverError(status: 503), into: .iamCredentials)
        #expect(
            await failure { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1")) }
                == .failed("IAM signJwt HTTP 503")
        )
        fake.inject(.hang, into: .iamCredentials)
        let (hasty, hastySource) = try makeSigner(fake, timeout: 1)
        let slow = await failure { try await hasty.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1")) }
        await hasty.shutdown()
        await hastySource.shutdown()
        guard case .failed(let text) = slow, FetchFailureReason(slow!) == .timeout else {
            Issue.record("a hanging IAM: \(String(describing: slow))")
            return
        }
        #expect(text.contains("IAM signJwt request failed"))
        // The metadata server down: a transient failure of the credentials, not the operator's.
        fake.inject(.serverError(status: 503), into: .metadata, times: nil)
        let (other, otherSource) = try makeSigner(fake)
        let down = await failure { try await other.fetchToken(for: TokenKey(kind: "vehicle", id: "v-9")) }
        guard case .failed(let downText) = down else {
            Issue.record("metadata down: \(String(describing: down))")
            return
        }
        #expect(downText.hasPrefix("host credentials:"))
        // And it still signs once the fault is gone.
        fake.clearFaults()
        _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
        await other.shutdown()
        await otherSource.shutdown()
        await shutdown(signer, source, fake)
    }

    @Test func bothFileTypesAuthorizeAndTheQuotaProjectIsSent() async throws {
        let fake = try await FakeGoogle.start()
        let directory = NSTemporaryDirectory() + "iam-signer-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let keyPath = directory + "/key.json"
        try fake.serviceAccountKeyJSON().write(to: URL(fileURLWithPath: keyPath))
        let userPath = directory + "/user.json"
        try fake.authorizedUserJSON(tokenURI: fake.tokenURI, quotaProject: "billing-project")
            .write(to: URL(fileURLWithPath: userPath))
        for (path, project) in [(keyPath, nil), (userPath, "billing-project")] as [(String, String?)] {
            fake.clearRecords()
            let source = try HostCredentials.discover(environment: ["GOOGLE_APPLICATION_CREDENTIALS": path])
            let (signer, _) = try makeSigner(fake, credentials: source)
            let fetched = try await signer.fetchToken(for: TokenKey(kind: "trip", id: "t-1"))
            #expect(fake.verify(fetched.token, account: Self.account) != nil)
            #expect(fake.tokenRequests.count == 1)
            #expect(fake.metadataRequests.isEmpty)
            #expect(fake.signJwtCalls.last?.userProject == project)
            await signer.shutdown()
            await source.shutdown()
        }
        await fake.stop()
    }

    /// A signer or credentials source dropped without `shutdown()` (a configuration build given up
    /// half-way, a test that ended early) closes its connections: it neither leaks them nor, in a
    /// debug build, traps in AsyncHTTPClient's `deinit` and ends every test of the process.
    @Test func aSignerOrSourceDroppedWithoutShutdownClosesItsConnections() async throws {
        let fake = try await FakeGoogle.start()
        func dropped(after fetches: Int) async throws {
            let (signer, _) = try makeSigner(fake)
            for id in 0..<fetches {
                _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-\(id)"))
            }
            if fetches > 0 { #expect(fake.openConnections == 2, "kept alive: the metadata server's and IAM's") }
        }
        func closed() async throws -> Bool {
            let deadline = ContinuousClock.now + hangLimitDuration
            while fake.openConnections > 0, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(10))
            }
            return fake.openConnections == 0
        }
        try await dropped(after: 2)
        #expect(try await closed())
        // Never used: no connection, and nothing to trap on.
        try await dropped(after: 0)
        #expect(try await closed())
        #expect(fake.signatureCount == 2)
        await fake.stop()
    }
}

@Suite("IAM signer: refused credentials")
struct IAMSignerCredentialsTests {
    @Test func aRevokedRefreshTokenIsTheOperatorsFault() async throws {
        let fake = try await FakeGoogle.start()
        let path = NSTemporaryDirectory() + "iam-signer-user-\(UUID().uuidString).json"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try fake.authorizedUserJSON(tokenURI: fake.tokenURI).write(to: URL(fileURLWithPath: path))
        fake.revokeRefreshToken()
        let source = try HostCredentials.discover(environment: ["GOOGLE_APPLICATION_CREDENTIALS": path])
        let signer = IAMSigner(
            account: FakeGoogle.defaultSigningAccount,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            credentials: source
        )
        do {
            _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
            Issue.record("signed with a revoked refresh token")
        } catch let error as ProviderError {
            guard case .misconfigured(let text, _) = error else {
                Issue.record("\(error)")
                return
            }
            #expect(text.hasPrefix("host credentials refused:"))
            #expect(text.contains("invalid_grant"))
        }
        #expect(fake.signJwtCalls.isEmpty)
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }
}
