import Foundation
import Testing
import TokenWire
import _CryptoExtras

@testable import TokenAgent

/// Google's replies (the metadata server's and the token endpoint's, IAM `signJwt`'s error bodies)
/// read strictly (issue 33 §5): a name given twice, at any depth, is never resolved by taking one.
@Suite("Google replies read strictly")
struct StrictGoogleReplyTests {
    static let account = "signer@project.iam.gserviceaccount.com"

    @Test func aSignJwtErrorBodyThatGivesANameTwiceIsNotReadAndSaysSo() {
        // Read leniently, the last reason would pick the operator's fix (grant Token Creator).
        let body =
            #"{"error":{"code":403,"status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/"#
            + #"google.rpc.ErrorInfo","reason":"SERVICE_DISABLED","reason":"IAM_PERMISSION_DENIED"}]}}"#
        let fault = SignerFault(status: 403, body: Array(body.utf8))
        #expect(fault.reason == nil)
        #expect(fault.googleStatus == nil)
        #expect(
            fault.text(account: Self.account)
                == "IAM signJwt for \(Self.account): HTTP 403 (its error body gives error.details.0.reason twice, "
                + "so it is not read); check the host identity's permissions on \(Self.account) "
                + "(Service Account Token Creator)"
        )
        let topLevel = SignerFault(status: 404, body: Array(#"{"error":{"status":"NOT_FOUND"},"error":{}}"#.utf8))
        #expect(topLevel.ambiguity == "its error body gives error twice, so it is not read")
        #expect(topLevel.googleStatus == nil)
        // Each name once: read as before.
        let once = SignerFault(
            status: 403,
            body: Array(body.replacingOccurrences(of: #""reason":"SERVICE_DISABLED","#, with: "").utf8)
        )
        #expect(once.reason == "IAM_PERMISSION_DENIED")
        #expect(once.googleStatus == "PERMISSION_DENIED")
        #expect(once.ambiguity == nil)
        #expect(once.text(account: Self.account).contains("roles/iam.serviceAccountTokenCreator"))
    }

    @Test func anOAuthErrorBodyThatGivesANameTwiceIsNotRepeated() {
        let cases: [(String, String)] = [
            (#"{"error":"invalid_grant","error":"invalid_client"}"#, ", error body not read: it gives error twice"),
            (
                #"{"error":"invalid_grant","error_description":"a","error_description":"b"}"#,
                ", error body not read: it gives error_description twice"
            ),
            (
                #"{"error":{"status":"PERMISSION_DENIED","status":"NOT_FOUND","message":"no"}}"#,
                ", error body not read: it gives error.status twice"
            ),
        ]
        for (body, field) in cases {
            #expect(AccessTokenExchange.errorField(Array(body.utf8)) == field, "\(body)")
        }
    }

    @Test func anAccessTokenReplyThatGivesAnyNameTwiceIsRefusedNamingIt() {
        let cases: [(String, String)] = [
            (#"{"access_token":"t","access_token":"u","expires_in":60}"#, "access_token"),
            (#"{"access_token":"t","expires_in":60,"scope":"a","scope":"b"}"#, "scope"),
            (#"{"access_token":"t","expires_in":60,"x":{"y":1,"y":2}}"#, "x.y"),
        ]
        for (reply, name) in cases {
            do {
                _ = try AccessTokenExchange.read(reply: Array(reply.utf8), endpoint: "metadata server m")
                Issue.record("read \(reply)")
            } catch {
                #expect(error.fault == .transient)
                #expect(error.message == "metadata server m: bad reply: \(name) appears twice")
            }
        }
    }

    @Test func aCredentialsFileThatGivesAnyNameTwiceIsRefusedNamingIt() {
        let text = String(decoding: TestKeys.authorizedUser(), as: UTF8.self)
        let twice = String(text.dropLast()) + #","universe_domain":"a","universe_domain":"b"}"#
        do {
            _ = try CredentialsFile.parse(Data(twice.utf8), path: "/adc.json")
            Issue.record("read a credentials file giving universe_domain twice")
        } catch {
            #expect(error.reason == "credentials file /adc.json: universe_domain appears twice")
        }
    }
}

/// One RS256 signer (``RS256Signer``) for every token the agent signs itself.
@Suite("One RS256 signer")
struct RS256SignerTests {
    /// `token`'s parts: its header and claims read strictly, and whether `key` verifies its signature.
    private func read(
        _ token: String,
        key: _RSA.Signing.PublicKey
    ) throws -> (header: [String], claims: StrictJSON.Object, verifies: Bool) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let headerBytes = try #require(StrictBase64URL.decode(parts[0]))
        let claimsBytes = try #require(StrictBase64URL.decode(parts[1]))
        let header = try #require(try StrictJSON.object(bytes: headerBytes))
        let claims = try #require(try StrictJSON.object(bytes: claimsBytes))
        let signature = try #require(StrictBase64URL.decode(parts[2]))
        #expect(signature.count == 256, "RSA-2048")
        let verifies = key.isValidSignature(
            _RSA.Signing.RSASignature(rawRepresentation: signature),
            for: Array("\(parts[0]).\(parts[1])".utf8),
            padding: .insecurePKCS1v1_5
        )
        #expect(
            parts[0] == JWTClaims.base64URLEncode(Array(#"{"alg":"RS256","kid":"kid-1","typ":"JWT"}"#.utf8)),
            "one header, written one way"
        )
        return (header.names, claims, verifies)
    }

    @Test func theLocalIssuerAndAServiceAccountsAssertionsSignThroughIt() throws {
        let key = TestKeys.rsa
        let now = 1_800_000_000.0
        // The local issuer's Fleet Engine token, from a key file.
        let issuer = try LocalIssuer(serviceAccountJSON: TestKeys.serviceAccount(), lifetime: 1800)
        let minted = try read(try issuer.mint(claim: "vehicleid", id: "v-1", now: now).token, key: key.publicKey)
        #expect(minted.verifies)
        #expect(minted.header == ["alg", "kid", "typ"])
        #expect(minted.claims["aud"] == .string(LocalIssuer.audience))
        #expect(minted.claims["authorization"] == .object([.init(name: "vehicleid", value: .string("v-1"))]))
        // A service-account credentials file's JWT-bearer assertion, from the same key.
        guard case .serviceAccount(let account) = try CredentialsFile.parse(TestKeys.serviceAccount(), path: "/k.json")
        else {
            Issue.record("not read as a service account")
            return
        }
        let assertion = try read(try account.assertion(now: now), key: key.publicKey)
        #expect(assertion.verifies)
        #expect(assertion.claims["aud"] == .string("https://oauth2.googleapis.com/token"))
        #expect(assertion.claims["scope"] == .string(ServiceAccountCredentials.scope))
        #expect(assertion.claims["exp"] == .number(now + 3600))
        // Another key does not verify either.
        let other = try _RSA.Signing.PrivateKey(keySize: .bits2048).publicKey
        let token = try RS256Signer(key: key, keyID: "kid-1").token(claims: ["iss": "x"])
        #expect(try read(token, key: key.publicKey).verifies)
        #expect(try read(token, key: other).verifies == false)
    }
}
