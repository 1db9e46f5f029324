import FakeGoogle
import Foundation
import Testing
import TokenAgent

@Suite("Host credentials caching")
struct CachingTests {
    @Test func fiftyConcurrentCallersShareOneFetch() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = try directory.write("user.json", fake.authorizedUserJSON(tokenURI: fake.tokenURI))
            try await withSource(.file(path: path, via: "test")) { source in
                let tokens = try await withThrowingTaskGroup(of: AccessToken.self) { group in
                    for _ in 0..<50 { group.addTask { try await source.accessToken() } }
                    return try await group.reduce(into: Set<AccessToken>()) { $0.insert($1) }
                }
                #expect(tokens.count == 1)
                #expect(fake.tokenRequests.count == 1)
                #expect(source.fetchCount == 1)
                // And later callers get the cached token.
                #expect(try await source.accessToken() == tokens.first)
                #expect(fake.tokenRequests.count == 1)
            }
        }
    }

    @Test func refreshesAheadOfExpiry() async throws {
        try await withFake { fake in
            // A ten-minute token is refreshed max(60 s, 10 %) = 60 s before it ends.
            fake.setAccessTokenLifetime(seconds: 600)
            let clock = HeldClock()
            try await withSource(.metadataServer(host: fake.metadataHost), clock: clock) { source in
                let first = try await source.accessToken()
                clock.advance(530)
                #expect(try await source.accessToken() == first)
                #expect(fake.metadataRequests.count == 1)
                clock.advance(11)
                let second = try await source.accessToken()
                #expect(second != first)
                #expect(fake.metadataRequests.count == 2)
                #expect(second.expiresAt.seconds > first.expiresAt.seconds + 500)
            }
        }
    }

    @Test func theMinimumMarginGovernsAShortLivedToken() async throws {
        try await withFake { fake in
            // Five minutes: 10 % is 30 s, less than the 100 s minimum, so it is refreshed 100 s
            // before it ends (the clock is stepped; real time adds only the test's own run).
            fake.setAccessTokenLifetime(seconds: 300)
            var tuning = fastTuning
            tuning.minimumRefreshMargin = 100
            let clock = HeldClock()
            try await withSource(.metadataServer(host: fake.metadataHost), tuning: tuning, clock: clock) { source in
                let first = try await source.accessToken()
                clock.advance(150)
                #expect(try await source.accessToken() == first)
                #expect(fake.metadataRequests.count == 1)
                clock.advance(60)
                let second = try await source.accessToken()
                #expect(second != first)
                #expect(fake.metadataRequests.count == 2)
            }
        }
    }

    @Test func invalidateForgetsOnlyTheCachedToken() async throws {
        try await withFake { fake in
            try await withSource(.metadataServer(host: fake.metadataHost)) { source in
                let first = try await source.accessToken()
                source.invalidate(first)
                let second = try await source.accessToken()
                #expect(second != first)
                #expect(fake.metadataRequests.count == 2)
                // A token no longer cached changes nothing.
                source.invalidate(first)
                #expect(try await source.accessToken() == second)
                #expect(fake.metadataRequests.count == 2)
            }
        }
    }

    @Test func transientFailureInTheRefreshWindowServesTheCachedToken() async throws {
        try await withFake { fake in
            fake.setAccessTokenLifetime(seconds: 600)
            let clock = HeldClock()
            try await withSource(.metadataServer(host: fake.metadataHost), clock: clock) { source in
                let first = try await source.accessToken()
                clock.advance(560)
                fake.inject(.serverError(status: 503), into: .metadata)
                #expect(try await source.accessToken() == first)
                #expect(fake.metadataRequests.count == 2)
                // The next caller tries again and gets a new token.
                #expect(try await source.accessToken() != first)
                // Too close to the end, the failure is the caller's.
                clock.advance(595)
                fake.inject(.serverError(status: 503), into: .metadata)
                let error = await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
                #expect(error?.fault == .transient)
            }
        }
    }

    @Test func refreshMargin() {
        let tuning = HostAccessTokenSource.Tuning()
        #expect(tuning.refreshMargin(lifetime: 3600) == 360)
        #expect(tuning.refreshMargin(lifetime: 300) == 60)
    }
}
