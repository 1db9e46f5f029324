import Foundation
import Testing
import TokenAgent

@Suite("Provider replies")
struct ProviderReplyTests {
    let now = 1_800_000_000.0

    private func read(
        _ json: String,
        _ reader: ProviderReply = ProviderReply(),
        contentType: String? = "application/json"
    )
        throws -> (token: String, expiresAt: Double?)
    {
        try reader.read(body: Array(json.utf8), contentType: contentType, now: now)
    }

    @Test func usualNamesWithAbsoluteSecondsOrMilliseconds() throws {
        #expect(try read(#"{"token":"abc","expiration":1800003600}"#) == ("abc", 1_800_003_600))
        #expect(try read(#"{"access_token":"abc","expires_at":1800003600000}"#) == ("abc", 1_800_003_600))
        #expect(try read(#"{"jwt":"abc","expirationTimestamp":"1800003600"}"#) == ("abc", 1_800_003_600))
        #expect(try read(#"{"token":"abc","expiration_timestamp_ms":1800003600500}"#) == ("abc", 1_800_003_600.5))
    }

    @Test func relativeExpiresIn() throws {
        #expect(try read(#"{"token":"abc","expires_in":3600}"#) == ("abc", now + 3600))
    }

    @Test func iso8601Expiry() throws {
        let (_, expiresAt) = try read(#"{"token":"abc","expirationTimestamp":"2027-01-15T08:00:00Z"}"#)
        #expect(expiresAt == 1_800_000_000)
        let (_, fractional) = try read(#"{"token":"abc","expiration":"2027-01-15T08:00:00.250Z"}"#)
        #expect(fractional == 1_800_000_000.25)
    }

    @Test func seedSampleShapeFindsTheOneJWT() throws {
        let jwt = makeJWT(["exp": 1_800_003_600, "authorization": ["vehicleid": "v-1"]])
        let (token, expiresAt) = try read(#"{"VEHICLE_TOKEN_KEY":"\#(jwt)","TOKEN_EXPIRATION":3600}"#)
        #expect(token == jwt)
        #expect(expiresAt == nil, "expiry then comes from the JWT's exp")
    }

    @Test func configuredFieldsAbsoluteOrRelative() throws {
        let relative = ProviderReply(
            tokenField: "TRIP_TOKEN_KEY",
            expiryField: "TOKEN_EXPIRATION",
            expiryMode: .relative
        )
        #expect(try read(#"{"TRIP_TOKEN_KEY":"opaque","TOKEN_EXPIRATION":3600}"#, relative) == ("opaque", now + 3600))
        let absolute = ProviderReply(
            tokenField: "TRIP_TOKEN_KEY",
            expiryField: "TOKEN_EXPIRATION",
            expiryMode: .absolute
        )
        #expect(
            try read(#"{"TRIP_TOKEN_KEY":"opaque","TOKEN_EXPIRATION":1800000900}"#, absolute) == (
                "opaque", 1_800_000_900
            )
        )
    }

    @Test func plainTextBodyIsTheToken() throws {
        #expect(try read("opaque-token\n", contentType: "text/plain; charset=utf-8") == ("opaque-token", nil))
        let jwt = makeJWT(["exp": 1_800_003_600])
        #expect(try read(jwt, contentType: "application/octet-stream") == (jwt, nil))
    }

    @Test func cachingHeadersGiveAPlainTokenItsExpiry() throws {
        let reader = ProviderReply()
        let headerExpiry = ProviderReply.expiry(cacheControl: "no-store, max-age=900", expires: nil, now: now)
        #expect(headerExpiry == now + 900)
        let plain = try reader.read(
            body: Array("opaque".utf8),
            contentType: "text/plain",
            headerExpiry: headerExpiry,
            now: now
        )
        #expect(plain == ("opaque", now + 900))
        let stated = try reader.read(
            body: Array(#"{"token":"a","expires_in":60}"#.utf8),
            contentType: "application/json",
            headerExpiry: headerExpiry,
            now: now
        )
        #expect(stated == ("a", now + 60), "the body's own expiry wins")
        #expect(
            ProviderReply.expiry(cacheControl: nil, expires: "Fri, 15 Jan 2027 08:00:00 GMT", now: now) == 1_800_000_000
        )
        #expect(ProviderReply.expiry(cacheControl: "private", expires: "yesterday", now: now) == nil)
    }

    @Test func garbageIsAProviderFailure() {
        let garbage = [
            ("<html>oops</html>", "text/html"), ("{not json", "application/json"), ("{}", "application/json"),
            (#"{"token":42}"#, "application/json"), (#"{"token":"a","expiration":true}"#, "application/json"),
            (#"{"token":"a","expiration":"soon"}"#, "application/json"), ("[1,2]", "application/json"),
        ]
        for (body, type) in garbage {
            #expect(throws: ProviderError.self, "\(body)") { try read(body, contentType: type) }
        }
        let two = #"{"a":"\#(makeJWT(["exp": 1]))","b":"\#(makeJWT(["exp": 2]))"}"#
        #expect(throws: ProviderError.failed("several JWTs in the reply")) { try read(two) }
    }
}

@Suite("Token acceptance")
struct TokenAcceptanceTests {
    let acceptance = TokenAcceptance()
    let now = 1_800_000_000.0
    let key = TokenKey(kind: "vehicle", id: "v-1")

    @Test func jwtExpBoundsTheStatedExpiry() throws {
        let jwt = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "v-1"]])
        #expect(
            try acceptance.accept(token: jwt, expiresAt: now + 3600, for: key, now: now).expiresAt.seconds == now + 600
        )
        #expect(
            try acceptance.accept(token: jwt, expiresAt: now + 60, for: key, now: now).expiresAt.seconds == now + 60
        )
        #expect(try acceptance.accept(token: jwt, expiresAt: nil, for: key, now: now).expiresAt.seconds == now + 600)
    }

    @Test func tokenForAnotherIDIsRejected() {
        let jwt = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "v-2"]])
        #expect(
            throws: ProviderError.rejected(
                "token's vehicleid claim names another id (token \(TokenFingerprint.of(jwt)))"
            )
        ) {
            try acceptance.accept(token: jwt, expiresAt: nil, for: key, now: now)
        }
        let trip = makeJWT(["exp": now + 600, "authorization": ["tripid": "other"]])
        #expect(throws: ProviderError.self) {
            try acceptance.accept(token: trip, expiresAt: nil, for: TokenKey(kind: "trip", id: "t-1"), now: now)
        }
    }

    @Test func aCanonicallyEquivalentButDifferentIdIsAnotherId() {
        // `e` with a combining accent against the precomposed `é`: equal as Swift Strings, not as bytes.
        let jwt = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "cafe\u{301}"]])
        #expect(
            throws: ProviderError.rejected(
                "token's vehicleid claim names another id (token \(TokenFingerprint.of(jwt)))"
            )
        ) {
            try acceptance.accept(token: jwt, expiresAt: nil, for: TokenKey(kind: "vehicle", id: "caf\u{E9}"), now: now)
        }
        #expect(TokenKey(kind: "vehicle", id: "cafe\u{301}") != TokenKey(kind: "vehicle", id: "caf\u{E9}"))
        #expect(
            Set([TokenKey(kind: "vehicle", id: "cafe\u{301}"), TokenKey(kind: "vehicle", id: "caf\u{E9}")]).count == 2
        )
    }

    @Test func otherKindsEntriesBesideTheKindsOwnAreFine() throws {
        let both = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "v-1", "tripid": "t-9"]])
        _ = try acceptance.accept(token: both, expiresAt: nil, for: key, now: now)
        let caseOnly = makeJWT(["exp": now + 600, "authorization": ["VehicleId": "v-1"]])
        _ = try acceptance.accept(token: caseOnly, expiresAt: nil, for: key, now: now)
        // A kind with no claim name (an opaque custom kind) takes any unambiguous claims.
        let custom = makeJWT(["exp": now + 600, "authorization": ["tripid": "t-9"]])
        _ = try acceptance.accept(token: custom, expiresAt: nil, for: TokenKey(kind: "custom", id: "c-1"), now: now)
    }

    @Test func expiredOrUnboundedOrUnprintableTokensFail() {
        #expect(throws: ProviderError.failed("token is already expired")) {
            try acceptance.accept(
                token: makeJWT(["exp": now - 1, "authorization": ["vehicleid": "v-1"]]),
                expiresAt: nil,
                for: key,
                now: now
            )
        }
        #expect(throws: ProviderError.self) {
            try acceptance.accept(token: "opaque", expiresAt: nil, for: key, now: now)
        }
        for bad in ["", "has space", "new\nline", "tab\there", "é", String(repeating: "x", count: 20_000)] {
            #expect(throws: ProviderError.self) {
                try acceptance.accept(token: bad, expiresAt: now + 60, for: key, now: now)
            }
        }
    }

    @Test func percentEncodingOfIDs() {
        #expect(HTTPTokenProvider.url(template: "{id}", id: "v-1_a.b~") == "v-1_a.b~")
        #expect(HTTPTokenProvider.url(template: "{id}", id: "a b%") == "a%20b%25")
        #expect(HTTPTokenProvider.url(template: "{id}", id: "行") == "%E8%A1%8C")
        #expect(HTTPTokenProvider.url(template: "http://h/token/{id}?x=1", id: "a&b") == "http://h/token/a%26b?x=1")
    }

    @Test func redactedURLDropsCredentialsAndQuery() {
        #expect(
            HTTPTokenProvider.redactedURL("https://user:secret@h.example/t/{id}?key=secret")
                == "https://h.example/t/ID?redacted"
        )
    }
}
