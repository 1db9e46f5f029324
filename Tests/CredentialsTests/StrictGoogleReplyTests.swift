import Foundation
import Testing
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
