import Testing
import TokenWire

@testable import TokenAgent

/// `generateAccessToken` replies read strictly: an opaque token of printable ASCII within the
/// protocol's bound, and an RFC 3339 `expireTime` in the future and no later than the lifetime
/// asked for (with a minute for the clocks).
@Suite("generateAccessToken replies")
struct GenerateAccessTokenReplyTests {
    static let sentAt = 1_767_225_600.0  // 2026-01-01T00:00:00Z

    private func read(_ text: String, lifetime: Double = 3600, now: Double = sentAt + 1) -> Result<
        GenerateAccessTokenReply, ProviderError
    > {
        do {
            return .success(
                try GenerateAccessTokenReply(body: Array(text.utf8), sentAt: Self.sentAt, lifetime: lifetime, now: now)
            )
        } catch {
            return .failure(error)
        }
    }

    @Test func goodReplies() throws {
        let reply = try read(#"{"accessToken":"ya29.c.b0Aa-x_y","expireTime":"2026-01-01T01:00:00Z"}"#).get()
        #expect(reply.token == "ya29.c.b0Aa-x_y")
        #expect(reply.expiresAt == Self.sentAt + 3600)
        // Fractions, an offset, other members Google may add, IAM's clock a little ahead.
        #expect(
            try read(#"{"expireTime":"2026-01-01T00:30:00.123456789+00:00","accessToken":"t","x":1}"#).get().expiresAt
                == Self.sentAt + 1800.123456789
        )
        #expect(try read(#"{"accessToken":"t","expireTime":"2026-01-01T01:00:59Z"}"#).get().expiresAt > 0)
        let longest = String(repeating: "a", count: AccessTokenKind.maxTokenBytes)
        #expect(try read(#"{"accessToken":"\#(longest)","expireTime":"2026-01-01T01:00:00Z"}"#).get().token == longest)
    }

    @Test(arguments: [
        (#"{"accessToken":"t"}"#, "reply has no expireTime string"),
        (#"{"expireTime":"2026-01-01T01:00:00Z"}"#, "reply has no accessToken string"),
        (#"{"accessToken":1,"expireTime":"2026-01-01T01:00:00Z"}"#, "reply has no accessToken string"),
        (
            #"{"accessToken":"t","accessToken":"u","expireTime":"2026-01-01T01:00:00Z"}"#,
            "reply gives accessToken twice"
        ),
        (#"{"accessToken":"t","expireTime":"x","expireTime":"2026-01-01T01:00:00Z"}"#, "reply gives expireTime twice"),
        // At any depth, as every JSON body from outside the agent is read (StrictJSON.object).
        (
            #"{"accessToken":"t","expireTime":"2026-01-01T01:00:00Z","x":[{"a":1,"a":2}]}"#,
            "reply gives x.0.a twice"
        ),
        (#"{"accessToken":"","expireTime":"2026-01-01T01:00:00Z"}"#, "reply's accessToken is empty"),
        (#"{"accessToken":"a b","expireTime":"2026-01-01T01:00:00Z"}"#, "not printable ASCII"),
        (#"{"accessToken":"a\nb","expireTime":"2026-01-01T01:00:00Z"}"#, "not printable ASCII"),
        (#"{"accessToken":"caf\u00e9","expireTime":"2026-01-01T01:00:00Z"}"#, "not printable ASCII"),
        (#"{"accessToken":"t","expireTime":"1767229200"}"#, "not an RFC 3339 date-time"),
        (#"{"accessToken":"t","expireTime":"2026-01-01 01:00:00"}"#, "not an RFC 3339 date-time"),
        (#"{"accessToken":"t","expireTime":"2026-02-30T01:00:00Z"}"#, "not an RFC 3339 date-time"),
        (#"{"accessToken":"t","expireTime":"2025-12-31T23:59:00Z"}"#, "expireTime is not in the future"),
        (#"{"accessToken":"t","expireTime":"2026-01-01T02:00:00Z"}"#, "7200 s away, past the 3600 s asked for"),
        ("[]", "reply is not a JSON object"),
        ("", "reply is not a JSON object"),
        (#"{"accessToken":"t","expireTime":"2026-01-01T01:00:00Z",}"#, "reply is not a JSON object"),
    ])
    func badRepliesFailNamingWhatIsWrong(reply: String, problem: String) {
        guard case .failure(.failed(let text)) = read(reply) else {
            Issue.record("accepted \(reply)")
            return
        }
        #expect(text.hasPrefix("IAM generateAccessToken "), "\(text)")
        #expect(text.contains(problem), "\(text)")
    }

    @Test func aTokenLongerThanTheProtocolCarriesIsRefused() {
        let long = String(repeating: "a", count: AccessTokenKind.maxTokenBytes + 1)
        guard
            case .failure(.failed(let text)) = read(#"{"accessToken":"\#(long)","expireTime":"2026-01-01T01:00:00Z"}"#)
        else {
            Issue.record("accepted a token over \(AccessTokenKind.maxTokenBytes) bytes")
            return
        }
        #expect(text.contains("over \(AccessTokenKind.maxTokenBytes) bytes"))
        // The bound keeps `REFRESH access <name> <token>` within a request line.
        let line =
            "REFRESH access \(String(repeating: "n", count: AccessTokenKind.maxNameBytes)) "
            + String(repeating: "a", count: AccessTokenKind.maxTokenBytes)
        #expect(line.utf8.count <= WireLimits.maxRequestLineBytes)
    }

    @Test func theRequestBodyIsGooglesShape() throws {
        let entry = ImpersonatedAccessTokens(
            name: "eta",
            account: "eta@p.iam.gserviceaccount.com",
            scopes: ["https://www.googleapis.com/auth/cloud-platform"],
            lifetime: 900,
            delegates: ["a@p.iam.gserviceaccount.com"],
            credentials: StaticTokenSource()
        )
        #expect(
            String(decoding: entry.requestBody, as: UTF8.self)
                == #"{"scope":["https://www.googleapis.com/auth/cloud-platform"],"lifetime":"900s","delegates":"#
                + #"["projects/-/serviceAccounts/a@p.iam.gserviceaccount.com"]}"#
        )
        let plain = ImpersonatedAccessTokens(
            name: "x",
            account: "x@p.iam.gserviceaccount.com",
            credentials: StaticTokenSource()
        )
        #expect(
            String(decoding: plain.requestBody, as: UTF8.self)
                == #"{"scope":["https://www.googleapis.com/auth/cloud-platform"],"lifetime":"3600s"}"#
        )
    }
}

/// A host token source that is never asked (request shapes only).
private struct StaticTokenSource: AccessTokenSource {
    var summary: String { "static" }
    var quotaProject: String? { nil }
    func accessToken() async throws(CredentialsError) -> AccessToken {
        AccessToken(value: "ya29.static", expiresAt: UnixTime(seconds: 4_000_000_000))
    }
    func invalidate(_ rejected: AccessToken) {}
    func shutdown() async {}
}
