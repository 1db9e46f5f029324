import Testing

@testable import TokenAgent

@Suite("Access token replies")
struct ReplyParsingTests {
    private func read(_ text: String) -> Result<FetchedAccessToken, CredentialsError> {
        do {
            return .success(try AccessTokenExchange.read(reply: Array(text.utf8), endpoint: "token endpoint x"))
        } catch {
            return .failure(error)
        }
    }

    @Test func goodReplies() throws {
        let token = try read(#"{"access_token":"ya29.abc","expires_in":3599,"token_type":"Bearer"}"#).get()
        #expect(token.value == "ya29.abc" && token.lifetime == 3599)
        #expect(try read(#"{"access_token":"t","expires_in":60,"scope":"x"}"#).get().lifetime == 60)
    }

    @Test(arguments: [
        #"{"expires_in":3599}"#, #"{"access_token":"t"}"#, #"{"access_token":"","expires_in":1}"#,
        #"{"access_token":"t","expires_in":0}"#, #"{"access_token":"t","expires_in":"3600"}"#,
        #"{"access_token":"t","expires_in":1,"token_type":"MAC"}"#, #"{"access_token":"a b","expires_in":1}"#,
        #"{"access_token":"t","access_token":"u","expires_in":1}"#, "[]", "not json", "",
    ])
    func badRepliesArePassingFailures(reply: String) {
        guard case .failure(let error) = read(reply) else {
            Issue.record("accepted \(reply)")
            return
        }
        #expect(error.fault == .transient)
        #expect(error.message.hasPrefix("token endpoint x: bad reply"))
    }

    @Test func errorFieldsRepeatOnlyTheErrorAndItsDescription() {
        #expect(
            AccessTokenExchange.errorField(
                Array(#"{"error":"invalid_grant","error_description":"Bad","refresh_token":"s3cret"}"#.utf8)
            ) == #", error "invalid_grant" ("Bad")"#
        )
        #expect(
            AccessTokenExchange.errorField(
                Array(#"{"error":{"code":403,"status":"PERMISSION_DENIED","message":"no"}}"#.utf8)
            ) == #", error "PERMISSION_DENIED" ("no")"#
        )
        #expect(AccessTokenExchange.errorField(Array("<html>".utf8)) == "")
    }
}
