import FakeGoogle
import Foundation
import Testing
import TokenAgent

/// Servers that send their head on time and then drip the body (one byte every 200 ms of a
/// 4 KiB body: minutes): every outside request of the host's credentials and of IAM `signJwt`
/// ends at its time-out with an error that says so, and a shared fetch never holds a caller who
/// comes after the endpoint recovered.
@Suite("Slow-drip bodies", .timeLimit(.minutes(2)))
struct SlowDripTests {
    /// The tuning of these tests: a 5 s time-out (a loaded machine answers a recovered server
    /// within it; the drip takes minutes); the connect time-out stays wide.
    private static let tuning = HostAccessTokenSource.Tuning(connectTimeout: 10, timeout: 5)

    /// The three ways of getting the host's access token, each against its dripping API.
    enum Grant: String, CaseIterable, Sendable {
        case metadata, serviceAccount, authorizedUser

        var api: FakeGoogleAPI { self == .metadata ? .metadata : .oauthToken }

        func origin(_ fake: FakeGoogle, in directory: TemporaryDirectory) throws -> HostCredentials.Origin {
            switch self {
            case .metadata: return .metadataServer(host: fake.metadataHost)
            case .serviceAccount:
                return .file(path: try directory.write("key.json", fake.serviceAccountKeyJSON()), via: "test")
            case .authorizedUser:
                let json = fake.authorizedUserJSON(tokenURI: fake.tokenURI)
                return .file(path: try directory.write("user.json", json), via: "test")
            }
        }
    }

    @Test(arguments: Grant.allCases)
    func anAccessTokenFetchEndsAtItsTimeout(_ grant: Grant) async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            fake.inject(.drip(intervalMilliseconds: 200), into: grant.api)
            try await withSource(try grant.origin(fake, in: directory), tuning: Self.tuning) { source in
                let started = Date()
                let error = await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
                let elapsed = Date().timeIntervalSince(started)
                #expect(error?.fault == .transient)
                #expect(error.map { Self.endedAtTheDeadline($0.message) } == true, "\(String(describing: error))")
                // The drip would take over 13 minutes; the margin is for a loaded machine.
                #expect(elapsed < 40, "ended by the time-out: \(elapsed) s")
                // The fault was for one request: the endpoint is back, and so are tokens.
                _ = try await source.accessToken()
            }
        }
    }

    /// A caller that joins a fetch stuck on a dripping metadata server is released with it, at the
    /// time-out, and the first caller after it gets a token from the recovered server.
    @Test func aCallerAfterRecoveryIsNotHeldByTheOldFlight() async throws {
        try await withFake { fake in
            fake.inject(.drip(intervalMilliseconds: 200), into: .metadata)
            try await withSource(.metadataServer(host: fake.metadataHost), tuning: Self.tuning) { source in
                let first = Task {
                    await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
                }
                for _ in 0..<400 where fake.metadataRequests.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
                #expect(fake.metadataRequests.count == 1, "the first fetch reached the dripping server")
                // The server recovers (the drip was for one request); a caller now joins the flight.
                let started = Date()
                let joined = await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
                #expect(joined.map { Self.endedAtTheDeadline($0.message) } == true, "\(String(describing: joined))")
                #expect(Date().timeIntervalSince(started) < 40, "released at the time-out")
                #expect(await first.value.map { Self.endedAtTheDeadline($0.message) } == true)
                let token = try await source.accessToken()
                #expect(!token.value.isEmpty)
                #expect(source.fetchCount == 2)
            }
        }
    }

    @Test func aSignJwtReplyEndsAtItsTimeout() async throws {
        try await withFake { fake in
            let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost), tuning: fastTuning)
            let signer = IAMSigner(
                account: FakeGoogle.defaultSigningAccount,
                endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
                credentials: source,
                connectTimeout: 10,
                timeout: 5
            )
            fake.inject(.drip(intervalMilliseconds: 200), into: .iamCredentials)
            let started = Date()
            let error = await providerError { try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1")) }
            #expect(Date().timeIntervalSince(started) < 40, "ended by the time-out")
            #expect(
                error.map { Self.endedAtTheDeadline("\($0)") } == true
                    && "\(String(describing: error))".contains("IAM signJwt"),
                "\(String(describing: error))"
            )
            #expect(error.map(FetchFailureReason.init) == .timeout)
            // Recovered: the next signature is served.
            _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
            await signer.shutdown()
            await source.shutdown()
        }
    }

    /// Whether a failure says the request ended at its deadline: "reading the reply timed out
    /// after 5 s" when the head came in time and the body did not (what a quiet machine shows:
    /// before the body had a deadline, these tests hung on the drip), or "Deadline exceeded" when
    /// a loaded machine was late with the head itself, or, for a caller of the host's shared
    /// fetch, "timed out after 6 s" (the flight's own deadline, a second later). Either way the
    /// request ended at its time-out, which is what these tests hold.
    static func endedAtTheDeadline(_ message: String) -> Bool {
        message.contains("reading the reply timed out after 5 s (the body did not end in time)")
            || message.contains("request failed: Deadline exceeded") || message.contains("timed out after 6 s")
    }

    /// The provider error `body` throws, or `nil`.
    private func providerError(_ body: () async throws -> FetchedToken) async -> ProviderError? {
        do {
            _ = try await body()
            return nil
        } catch {
            return error as? ProviderError
        }
    }
}
