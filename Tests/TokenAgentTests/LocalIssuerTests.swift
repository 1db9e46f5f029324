import Crypto
import Foundation
import Testing
import TokenAgent
import TokenWire
import _CryptoExtras

@Suite("Local issuer")
struct LocalIssuerTests {
    private func decode(_ part: Substring) throws -> [String: Any] {
        let data = try #require(StrictBase64URL.decode(part))
        return try #require(try JSONSerialization.jsonObject(with: Data(data)) as? [String: Any])
    }

    @Test func mintsFleetEngineClaimsSignedRS256() throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let account: [String: String] = [
            "type": "service_account",
            "private_key": key.pkcs8PEMRepresentation,
            "private_key_id": "kid-123",
            "client_email": "fleet@project.iam.gserviceaccount.com",
        ]
        let issuer = try LocalIssuer(
            serviceAccountJSON: JSONSerialization.data(withJSONObject: account),
            lifetime: 1800
        )
        let minted = try issuer.mint(claim: "tripid", id: "t-1", now: 1_800_000_000)
        #expect(minted.expiresAt.seconds == 1_800_001_800)
        let parts = minted.token.split(separator: ".")
        #expect(parts.count == 3)
        let header = try decode(parts[0])
        #expect(header as NSDictionary == ["alg": "RS256", "typ": "JWT", "kid": "kid-123"] as NSDictionary)
        let claims = try decode(parts[1])
        let expected: NSDictionary = [
            "iss": "fleet@project.iam.gserviceaccount.com", "sub": "fleet@project.iam.gserviceaccount.com",
            "aud": "https://fleetengine.googleapis.com/", "iat": 1_800_000_000, "exp": 1_800_001_800,
            "authorization": ["tripid": "t-1"],
        ]
        #expect(claims as NSDictionary == expected)
        let signature = _RSA.Signing.RSASignature(rawRepresentation: try #require(StrictBase64URL.decode(parts[2])))
        let signed = Array("\(parts[0]).\(parts[1])".utf8)
        #expect(key.publicKey.isValidSignature(signature, for: signed, padding: .insecurePKCS1v1_5))
        #expect(!key.publicKey.isValidSignature(signature, for: signed + [0], padding: .insecurePKCS1v1_5))
    }

    @Test func everyWellKnownKindGetsItsClaim() async throws {
        let issuer = try LocalIssuer.demo()
        for kind in FleetEngineKinds.all {
            let fetched = try await issuer.fetchToken(for: TokenKey(kind: kind, id: "id-1"))
            let claims = try #require(JWTClaims(token: fetched.token))
            #expect(claims.authorization == .entries([FleetEngineKinds.claimNames[kind]!: "id-1"]))
            #expect(claims.problem == nil)
        }
        for id in ["*", ".", ".."] {
            await #expect(throws: ProviderError.self, "no token is signed for \(id)") {
                try await issuer.fetchToken(for: TokenKey(kind: "vehicle", id: id))
            }
        }
        await #expect(throws: ProviderError.self) {
            try await issuer.fetchToken(for: TokenKey(kind: "custom", id: "x"))
        }
    }

    @Test func lifetimeIsAtMostAnHour() async throws {
        let issuer = try LocalIssuer.demo(lifetime: 7200)
        // The demo key is made on a thread of its own; wait for it without blocking the pool.
        await issuer.ready()
        #expect(issuer.lifetime == 3600)
        #expect(try issuer.mint(claim: "vehicleid", id: "v", now: 0).expiresAt.seconds == 3600)
    }

    @Test func badKeysAreRefusedWithAReason() {
        #expect(throws: IssuerKeyError.self) { try LocalIssuer(serviceAccountJSON: Data("{}".utf8)) }
        let notRSA: [String: String] = [
            "private_key": "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            "private_key_id": "k", "client_email": "e",
        ]
        #expect(throws: IssuerKeyError.self) {
            try LocalIssuer(serviceAccountJSON: JSONSerialization.data(withJSONObject: notRSA))
        }
    }
}
