import FakeGoogle
import Foundation
import Testing
import TokenAgent

@testable import FleetTokenClient

/// The client's memo reads a JWT's `iat` as strictly as the agent reads a provider's payload
/// (strict unpadded base64url, no claim twice): every token the agent's own issuers serve must
/// still read, or the memo would take them for opaque tokens and ask the agent far more often.
/// One token each from the demo issuer, a key-file issuer and the key-less (IAM `signJwt`) one.
@Suite("The client memo reads the tokens the agent serves")
struct MemoServedTokensTests {
    private static let key = TokenKey(kind: "vehicle", id: "v-1")

    /// Whether the memo reads `token`'s `iat` as the agent does.
    private func expectTheMemoReads(_ token: FetchedToken, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let claims = try #require(JWTClaims(token: token.token), "a JWT", sourceLocation: sourceLocation)
        #expect(claims.problem == nil, sourceLocation: sourceLocation)
        let issuedAt = try #require(claims.issuedAt, "with an iat", sourceLocation: sourceLocation)
        #expect(MemoTable.issuedAt(ofJWT: token.token) == issuedAt, sourceLocation: sourceLocation)
    }

    @Test func theDemoIssuersTokens() async throws {
        let issuer = try LocalIssuer.demo()
        try expectTheMemoReads(try await issuer.fetchToken(for: Self.key))
    }

    @Test func aKeyFileIssuersTokens() async throws {
        let fake = try await FakeGoogle.start()
        let json = fake.serviceAccountKeyJSON()
        await fake.stop()
        let issuer = try LocalIssuer(serviceAccountJSON: json)
        try expectTheMemoReads(try await issuer.fetchToken(for: Self.key))
    }

    @Test func keylessIAMSignedTokens() async throws {
        let fake = try await FakeGoogle.start()
        let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost))
        let signer = IAMSigner(
            account: FakeGoogle.defaultSigningAccount,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            credentials: source,
            connectTimeout: 10  // loopback, but a loaded full run can be slow to accept
        )
        let token: Result<FetchedToken, any Error>
        do { token = .success(try await signer.fetchToken(for: Self.key)) } catch { token = .failure(error) }
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
        try expectTheMemoReads(try token.get())
    }
}
