import FakeGoogle
import Foundation
import Testing
import TokenAgent

/// Each kind of Application Default Credentials, from discovery to an access token the fake's IAM
/// Credentials accepts.
@Suite("Host credentials end to end")
struct EndToEndTests {
    /// Signs a JWT at the fake with `token` and checks the signature.
    private func expectSigns(_ fake: FakeGoogle, token: AccessToken, userProject: String? = nil) async throws {
        let account = FakeGoogle.defaultSigningAccount
        let reply = try await signJwt(
            fake,
            account: account,
            claims: ["iss": account, "exp": Int(Date().timeIntervalSince1970) + 600],
            token: token.value,
            userProject: userProject
        )
        #expect(reply.status == 200)
        let jwt = try #require(reply.json["signedJwt"] as? String)
        #expect(reply.json["keyId"] as? String == fake.keyID(for: account))
        #expect(fake.verify(jwt, account: account)?["iss"] as? String == account)
        #expect(fake.signJwtCalls.last?.userProject == userProject)
    }

    @Test func serviceAccountKeyFile() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            let path = try directory.write("key.json", fake.serviceAccountKeyJSON())
            let source = try HostCredentials.discover(environment: ["GOOGLE_APPLICATION_CREDENTIALS": path])
            let token = try await source.accessToken()
            await source.shutdown()
            let issued = try #require(fake.issuedAccessTokens.last)
            #expect(issued.value == token.value)
            #expect(issued.subject == FakeGoogle.keyFileAccount)
            #expect(fake.tokenRequests.map(\.grantType) == ["urn:ietf:params:oauth:grant-type:jwt-bearer"])
            #expect(abs(token.expiresAt.seconds - (Date().timeIntervalSince1970 + 3600)) < 30)
            #expect(source.summary.contains(FakeGoogle.keyFileAccount))
            try await expectSigns(fake, token: token)
        }
    }

    @Test func authorizedUserFileFromGcloudDirectory() async throws {
        try await withFake { fake in
            let directory = try TemporaryDirectory()
            defer { directory.remove() }
            try directory.write(
                ".config/gcloud/\(HostCredentials.gcloudFileName)",
                fake.authorizedUserJSON(tokenURI: fake.tokenURI, quotaProject: "billed-project")
            )
            let source = try HostCredentials.discover(environment: ["HOME": directory.path])
            #expect(source.quotaProject == "billed-project")
            let token = try await source.accessToken()
            await source.shutdown()
            #expect(fake.issuedAccessTokens.last?.subject == FakeGoogle.clientID)
            #expect(fake.tokenRequests.map(\.grantType) == ["refresh_token"])
            try await expectSigns(fake, token: token, userProject: source.quotaProject)
        }
    }

    @Test func metadataServer() async throws {
        try await withFake { fake in
            let source = try HostCredentials.discover(
                environment: ["GCE_METADATA_HOST": fake.metadataHost, "HOME": "/nonexistent"]
            )
            #expect(source.summary == "metadata server \(fake.metadataHost)")
            let token = try await source.accessToken()
            await source.shutdown()
            #expect(fake.metadataRequests.map(\.flavor) == ["Google"])
            #expect(fake.issuedAccessTokens.last?.issuer == .metadata)
            try await expectSigns(fake, token: token)
        }
    }

    @Test func fakeMetadataServerRefusesRequestsWithoutTheFlavorHeader() async throws {
        try await withFake { fake in
            let url = "http://\(fake.metadataHost)/computeMetadata/v1/instance/service-accounts/default/token"
            let bare = try await httpExchange(url)
            #expect(bare.status == 403)
            #expect(String(decoding: bare.body, as: UTF8.self).contains("Metadata-Flavor"))
            let wrong = try await httpExchange(url, headers: [("Metadata-Flavor", "Amazon")])
            #expect(wrong.status == 403)
            #expect(fake.issuedAccessTokens.isEmpty)
            let right = try await httpExchange(url, headers: [("Metadata-Flavor", "Google")])
            #expect(right.status == 200)
            #expect(right.headers.first(name: "Metadata-Flavor") == "Google")
        }
    }
}
