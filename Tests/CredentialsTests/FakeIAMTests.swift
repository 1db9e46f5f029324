import FakeGoogle
import Foundation
import Testing
import TokenAgent

/// The fake's IAM Credentials, as a signer sees it (and as its tests rely on it).
@Suite("Fake IAM Credentials")
struct FakeIAMTests {
    private static let account = FakeGoogle.defaultSigningAccount

    /// An access token from the fake's metadata server.
    private func token(_ fake: FakeGoogle) async throws -> String {
        try await withSource(.metadataServer(host: fake.metadataHost)) { try await $0.accessToken().value }
    }

    private func claims() -> [String: Any] { ["iss": Self.account, "exp": Int(Date().timeIntervalSince1970) + 600] }

    private func error(_ json: [String: Any]) -> (code: Int?, status: String?, reason: String?, domain: String?) {
        let error = json["error"] as? [String: Any]
        let info = (error?["details"] as? [[String: Any]])?.first {
            $0["@type"] as? String == "type.googleapis.com/google.rpc.ErrorInfo"
        }
        return (
            error?["code"] as? Int, error?["status"] as? String, info?["reason"] as? String, info?["domain"] as? String
        )
    }

    @Test func authorizationIsRequiredAndExpires() async throws {
        try await withFake { fake in
            let missing = try await signJwt(fake, account: Self.account, claims: claims(), token: nil)
            #expect(missing.status == 401)
            #expect(error(missing.json).status == "UNAUTHENTICATED")
            let unknown = try await signJwt(fake, account: Self.account, claims: claims(), token: "ya29.made-up")
            #expect(unknown.status == 401)
            let token = try await token(fake)
            #expect(try await signJwt(fake, account: Self.account, claims: claims(), token: token).status == 200)
            fake.expireAccessTokens()
            let expired = try await signJwt(fake, account: Self.account, claims: claims(), token: token)
            #expect(expired.status == 401)
            #expect(error(expired.json).reason == "ACCESS_TOKEN_EXPIRED")
            #expect(fake.signatureCount == 1)
            #expect(fake.signJwtCalls.map(\.status) == [401, 401, 200, 401])
        }
    }

    @Test func unknownAccountIsNotFound() async throws {
        try await withFake { fake in
            let token = try await token(fake)
            let reply = try await signJwt(
                fake,
                account: "nobody@x.iam.gserviceaccount.com",
                claims: claims(),
                token: token
            )
            #expect(reply.status == 404)
            #expect(error(reply.json).code == 404)
            #expect(error(reply.json).status == "NOT_FOUND")
            fake.removeAccount(Self.account)
            #expect(try await signJwt(fake, account: Self.account, claims: claims(), token: token).status == 404)
        }
    }

    @Test func scriptedFaultsSpeakGooglesDialect() async throws {
        try await withFake { fake in
            let token = try await token(fake)
            let domains: [FakeGoogleFault.PermissionDeniedReason: String] = [
                .iamPermissionDenied: "iam.googleapis.com", .serviceDisabled: "googleapis.com",
                .accessTokenScopeInsufficient: "googleapis.com",
            ]
            for reason in FakeGoogleFault.PermissionDeniedReason.allCases {
                fake.inject(.permissionDenied(reason), into: .iamCredentials, account: Self.account)
                let reply = try await signJwt(fake, account: Self.account, claims: claims(), token: token)
                #expect(reply.status == 403)
                let parsed = error(reply.json)
                #expect(parsed.status == "PERMISSION_DENIED" && parsed.reason == reason.rawValue)
                #expect(parsed.domain == domains[reason])
            }
            fake.inject(.tooManyRequests(retryAfterSeconds: 9), into: .iamCredentials)
            let throttled = try await signJwt(fake, account: Self.account, claims: claims(), token: token)
            #expect(throttled.status == 429 && throttled.headers.first(name: "Retry-After") == "9")
            fake.inject(.unauthorized, into: .iamCredentials, times: 2)
            fake.inject(.serverError(status: 503), into: .iamCredentials)
            var statuses: [Int] = []
            for _ in 0..<4 {
                statuses.append(try await signJwt(fake, account: Self.account, claims: claims(), token: token).status)
            }
            #expect(statuses == [401, 401, 503, 200])
            // A fault for another account leaves this one alone.
            fake.inject(.badRequest, into: .iamCredentials, account: "other@x.iam.gserviceaccount.com")
            #expect(try await signJwt(fake, account: Self.account, claims: claims(), token: token).status == 200)
        }
    }

    @Test func signsWithLatencyAndRecordsTheCall() async throws {
        try await withFake { fake in
            let token = try await token(fake)
            fake.setIAMLatency(milliseconds: 200)
            let started = Date()
            let reply = try await signJwt(
                fake,
                account: Self.account,
                claims: ["iss": Self.account, "authorization": ["vehicleid": "v-1"]],
                token: token,
                userProject: "billing"
            )
            #expect(Date().timeIntervalSince(started) >= 0.2)
            #expect(reply.status == 200)
            let jwt = try #require(reply.json["signedJwt"] as? String)
            let claims = try #require(fake.verify(jwt, account: Self.account))
            // IAM adds an `exp` an hour ahead when the payload has none.
            let exp = try #require(claims["exp"] as? Int)
            #expect(abs(Double(exp) - Date().timeIntervalSince1970 - 3600) < 30)
            #expect(fake.verify(jwt, account: FakeGoogle.keyFileAccount) == nil)
            let call = try #require(fake.signJwtCalls.last)
            #expect(call.userProject == "billing" && call.accessToken == token && call.account == Self.account)
            #expect((call.claims?["authorization"] as? [String: String]) == ["vehicleid": "v-1"])
            #expect(fake.publicKeyPEM(for: Self.account)?.hasPrefix("-----BEGIN PUBLIC KEY-----") == true)
        }
    }
}
