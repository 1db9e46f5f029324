import FakeGoogle
import Foundation
import Testing
import TokenAgent
import TokenWire

/// Access tokens by impersonation against the fake's IAM Credentials `generateAccessToken`: the
/// request as Google documents it, the reply read strictly, each fault handled as for `signJwt`
/// (the operator's named with the fix), and the entry's own budget spent as each call leaves.
@Suite("Access tokens by impersonation")
struct ImpersonatedAccessTokensTests {
    static let account = "fleet-admin@fake-project.iam.gserviceaccount.com"
    static let delegate = "relay@fake-project.iam.gserviceaccount.com"
    static let key = TokenKey(kind: AccessTokenKind.kind(name: "fleet-admin"), id: "fleet-admin")

    /// A fake that knows the account and the delegate, and an entry whose host token comes from
    /// the fake's metadata server.
    private func withEntry(
        scopes: [String] = AccessTokenSettings.defaultScopes,
        lifetime: Double = 3600,
        delegates: [String] = [],
        budget: SignatureBudget? = nil,
        timeout: Double = 10,
        _ body: (ImpersonatedAccessTokens, FakeGoogle) async throws -> Void
    ) async throws {
        try await withFake { fake in
            try await fake.addAccount(Self.account)
            try await fake.addAccount(Self.delegate)
            let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost))
            let entry = ImpersonatedAccessTokens(
                name: "fleet-admin",
                account: Self.account,
                scopes: scopes,
                lifetime: lifetime,
                delegates: delegates,
                endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
                credentials: source,
                budget: budget,
                connectTimeout: 10,
                timeout: timeout
            )
            do {
                try await body(entry, fake)
            } catch {
                await entry.shutdown()
                await source.shutdown()
                throw error
            }
            await entry.shutdown()
            await source.shutdown()
        }
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

    @Test func theTokenIsTheAccountsAsAskedWithItsScopesLifetimeAndDelegates() async throws {
        let scopes = ["https://www.googleapis.com/auth/cloud-platform", "openid"]
        try await withEntry(scopes: scopes, lifetime: 1800, delegates: [Self.delegate]) { entry, fake in
            let before = Date().timeIntervalSince1970
            let token = try await entry.fetchToken(for: Self.key)
            let call = try #require(fake.generateAccessTokenCalls.first)
            #expect(call.account == Self.account)
            #expect(call.scopes == scopes)
            #expect(call.lifetime == "1800s")
            #expect(call.delegates == ["projects/-/serviceAccounts/\(Self.delegate)"])
            #expect(call.issued == token.token)
            #expect(fake.issuedAccessTokens.first { $0.value == call.accessToken }?.issuer == .metadata)
            #expect(token.expiresAt.seconds >= before + 1799 && token.expiresAt.seconds <= before + 1801)
            #expect(entry.servingFloor == AccessTokenKind.servingFloor)
            #expect(entry.tokensStayInMemory)
            // A key that is not the entry's is never asked for.
            let other = TokenKey(kind: AccessTokenKind.kind(name: "other"), id: "other")
            #expect(
                await failure { try await entry.fetchToken(for: other) }.map { "\($0)" }?.contains("rejected") == true
            )
            #expect(fake.generateAccessTokenCalls.count == 1)
        }
    }

    @Test func eachFaultIsHandledAsForSignJwtAndTheOperatorsNamesTheFix() async throws {
        try await withEntry { entry, fake in
            // 401 once: a fresh host token and one more try.
            fake.inject(.unauthorized, into: .generateAccessToken)
            _ = try await entry.fetchToken(for: Self.key)
            #expect(fake.generateAccessTokenCalls.map(\.status) == [401, 200])
            #expect(fake.metadataRequests.count == 2, "the refused host token was replaced")

            // 429 and 5xx pass; nothing is held.
            fake.inject(.tooManyRequests(retryAfterSeconds: 17), into: .generateAccessToken)
            #expect(
                await failure { try await entry.fetchToken(for: Self.key) }
                    == .throttled("IAM generateAccessToken HTTP 429", retryAfter: 17)
            )
            fake.inject(.serverError(status: 503), into: .generateAccessToken)
            #expect(
                await failure { try await entry.fetchToken(for: Self.key) }
                    == .failed("IAM generateAccessToken HTTP 503")
            )
            _ = try await entry.fetchToken(for: Self.key)

            // 403: the operator's, with the fix; held without calling IAM again.
            fake.inject(.permissionDenied(.iamPermissionDenied), into: .generateAccessToken)
            guard
                case .misconfigured(let denied, let hold)? = await failure({ try await entry.fetchToken(for: Self.key) }
                )
            else {
                Issue.record("a 403 is the operator's")
                return
            }
            #expect(denied.hasPrefix("IAM generateAccessToken for \(Self.account): HTTP 403 IAM_PERMISSION_DENIED"))
            #expect(
                denied.contains("grant the host's identity roles/iam.serviceAccountTokenCreator on \(Self.account)")
            )
            #expect(hold == 30)
            let calls = fake.generateAccessTokenCalls.count
            guard case .misconfigured? = await failure({ try await entry.fetchToken(for: Self.key) }) else {
                Issue.record("held")
                return
            }
            #expect(fake.generateAccessTokenCalls.count == calls, "held off without calling IAM")
        }
        try await withEntry { entry, fake in
            fake.inject(.permissionDenied(.serviceDisabled), into: .generateAccessToken)
            guard case .misconfigured(let disabled, _)? = await failure({ try await entry.fetchToken(for: Self.key) })
            else {
                Issue.record("SERVICE_DISABLED is the operator's")
                return
            }
            #expect(disabled.contains("SERVICE_DISABLED; enable iamcredentials.googleapis.com"))
        }
        try await withEntry { entry, fake in
            fake.removeAccount(Self.account)
            guard case .misconfigured(let missing, _)? = await failure({ try await entry.fetchToken(for: Self.key) })
            else {
                Issue.record("a 404 is the operator's")
                return
            }
            #expect(missing.contains("HTTP 404"))
            #expect(missing.contains("no such service account \(Self.account): check access_tokens' service_account"))
        }
    }

    @Test func aSlowReplyFailsWithinTheTimeOut() async throws {
        try await withEntry(timeout: 1) { entry, fake in
            fake.inject(.hang, into: .generateAccessToken)
            guard case .failed(let hung)? = await failure({ try await entry.fetchToken(for: Self.key) }) else {
                Issue.record("a silent IAM is a passing failure")
                return
            }
            #expect(hung.hasPrefix("IAM generateAccessToken request failed"), "\(hung)")
            fake.inject(.drip(intervalMilliseconds: 200), into: .generateAccessToken)
            guard case .failed(let dripped)? = await failure({ try await entry.fetchToken(for: Self.key) }) else {
                Issue.record("a dripping IAM is a passing failure")
                return
            }
            #expect(dripped.contains("reading the reply timed out after 1 s"), "\(dripped)")
        }
    }

    @Test func eachCallSpendsAPermitOfTheEntrysOwnBudgetAsItLeaves() async throws {
        let budget = SignatureBudget(perMinute: 60)
        try await withEntry(budget: budget) { entry, fake in
            #expect(entry.signatureBudget === budget)
            fake.inject(.unauthorized, into: .generateAccessToken)
            let engine = TokenEngine(providers: [Self.key.kind: entry])
            let served = try await engine.get(kind: Self.key.kind, id: Self.key.id).get()
            #expect(served.token == fake.generateAccessTokenCalls.last?.issued)
            // The first request and the retry after the 401: two calls, two permits.
            #expect(budget.counters.signatures == 2)
            #expect(fake.generateAccessTokenCalls.count == 2)
        }
    }
}
