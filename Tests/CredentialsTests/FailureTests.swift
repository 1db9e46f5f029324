import FakeGoogle
import Foundation
import Testing
import TokenAgent

@Suite("Host credentials failures")
struct FailureTests {
    /// The error of one fetch from `source`.
    private func fetchError(_ source: HostAccessTokenSource) async -> CredentialsError? {
        await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
    }

    @Test func revokedRefreshTokenIsTheOperatorsFault() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let json = fake.authorizedUserJSON(tokenURI: fake.tokenURI)
            let path = try directory.write("user.json", json)
            fake.revokeRefreshToken()
            try await withSource(.file(path: path, via: "test")) { source in
                let error = try #require(await fetchError(source))
                #expect(error.fault == .credentials)
                #expect(error.message.contains("token endpoint \(fake.tokenURI)"))
                #expect(error.message.contains("HTTP 400"))
                #expect(error.message.contains("invalid_grant"))
                #expect(error.message.contains("gcloud auth application-default login"))
                let object = try #require(try JSONSerialization.jsonObject(with: json) as? [String: String])
                for secret in [object["client_secret"]!, object["refresh_token"]!] {
                    #expect(!error.message.contains(secret))
                }
            }
        }
    }

    @Test func invalidGrantForAServiceAccount() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = try directory.write("key.json", fake.serviceAccountKeyJSON())
            fake.inject(.badRequest, into: .oauthToken)
            try await withSource(.file(path: path, via: "test")) { source in
                let error = try #require(await fetchError(source))
                #expect(error.fault == .credentials)
                #expect(error.message.contains("invalid_grant"))
                #expect(error.message.contains(FakeGoogle.keyFileAccount))
                #expect(!error.message.contains("PRIVATE KEY"))
                // The fault was for one request: the next fetch succeeds.
                _ = try await source.accessToken()
            }
        }
    }

    @Test func serverErrorsAndThrottlingArePassing() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = try directory.write("key.json", fake.serviceAccountKeyJSON())
            try await withSource(.file(path: path, via: "test")) { source in
                fake.inject(.serverError(status: 503), into: .oauthToken)
                let unavailable = try #require(await fetchError(source))
                #expect(unavailable.fault == .transient)
                #expect(unavailable.message.contains("HTTP 503"))
                #expect(unavailable.retryAfter == nil)
                fake.inject(.tooManyRequests(retryAfterSeconds: 7), into: .oauthToken)
                let throttled = try #require(await fetchError(source))
                #expect(throttled.fault == .transient)
                #expect(throttled.retryAfter == 7)
                fake.inject(.dropConnection, into: .oauthToken)
                #expect(await fetchError(source)?.fault == .transient)
                fake.inject(.serverError(status: 500), into: .oauthToken)
                #expect(await fetchError(source)?.fault == .transient)
                _ = try await source.accessToken()
                #expect(fake.tokenRequests.map(\.status) == [503, 429, 0, 500, 200])
            }
        }
    }

    /// A connection closed before any answer (a server's keep-alive time-out racing the pool's
    /// reuse of the connection) costs a GET nothing: it is sent once more on another connection.
    /// A server that closes every connection unanswered is asked twice, and the fetch fails.
    @Test func aGETWhoseConnectionClosesUnansweredIsSentOnceMore() async throws {
        try await withFake { fake in
            try await withSource(.metadataServer(host: fake.metadataHost)) { source in
                fake.inject(.dropConnection, into: .metadata)
                _ = try await source.accessToken()
                #expect(fake.metadataRequests.count == 2, "the dropped request and the one sent again")
            }
        }
        try await withFake { fake in
            try await withSource(.metadataServer(host: fake.metadataHost)) { source in
                fake.inject(.dropConnection, into: .metadata, times: 2)
                let error = try #require(await fetchError(source))
                #expect(error.fault == .transient)
                #expect(error.message.contains("Remote connection closed"), "\(error.message)")
                #expect(fake.metadataRequests.count == 2, "asked twice, no more")
            }
        }
    }

    @Test func metadataServerDown() async throws {
        try await withFake { fake in
            fake.inject(.serverError(status: 503), into: .metadata, times: nil)
            try await withSource(.metadataServer(host: fake.metadataHost)) { source in
                let error = try #require(await fetchError(source))
                #expect(error.fault == .transient)
                #expect(error.message.contains("metadata server \(fake.metadataHost)"))
                fake.clearFaults()
                _ = try await source.accessToken()
            }
        }
    }

    @Test func metadataServerNotListening() async throws {
        let fake = try await FakeGoogle.start()
        let host = fake.metadataHost
        await fake.stop()
        let source = try HostCredentials.discover(
            environment: ["GCE_METADATA_HOST": host, "HOME": "/nonexistent"],
            tuning: fastTuning
        )
        let error = await credentialsError { () throws(CredentialsError) in try await source.accessToken() }
        await source.shutdown()
        #expect(error?.fault == .transient)
        // The refused connection (`request failed: ...`) or, when a loaded machine delays that
        // report past the flight's deadline, the flight's time-out (`timed out after N s`).
        let message = error?.message ?? ""
        #expect(message.contains("request failed") || message.contains("timed out after"), "\(message)")
    }

    @Test func metadataServerWithoutAServiceAccount() async throws {
        try await withFake { fake in
            fake.inject(.notFound, into: .metadata)
            try await withSource(.metadataServer(host: fake.metadataHost)) { source in
                let error = try #require(await fetchError(source))
                #expect(error.fault == .credentials)
                #expect(error.message.contains("HTTP 404"))
            }
        }
    }

    @Test func silentEndpointTimesOut() async throws {
        try await withFake { fake in
            fake.inject(.hang, into: .metadata)
            var tuning = fastTuning
            tuning.timeout = 0.5
            try await withSource(.metadataServer(host: fake.metadataHost), tuning: tuning) { source in
                let started = Date()
                let error = await fetchError(source)
                #expect(error?.fault == .transient)
                // Ended by the request's deadline (`request failed: Deadline exceeded`) or, when a
                // loaded machine delays that report, by the flight's (`timed out after N s`).
                let message = error?.message ?? ""
                #expect(message.contains("request failed") || message.contains("timed out after"), "\(message)")
                // A hang detector: the message says the time-out ended it.
                #expect(Date().timeIntervalSince(started) < 60)
            }
        }
    }

    @Test func shutDownSourceFailsTransiently() async throws {
        let source = try HostCredentials.source(for: .metadataServer(host: "127.0.0.1:1"))
        await source.shutdown()
        #expect(await fetchError(source)?.fault == .transient)
    }
}
