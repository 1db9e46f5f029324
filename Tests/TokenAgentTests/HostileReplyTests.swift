import Foundation
import Testing
import TokenAgent
import TokenWire

/// Replies a provider could send to hurt the agent: expiries at and past every edge, JWTs whose
/// claims say two things at once or act for everyone. Each is refused with a clear error or
/// bounded; none traps (a trap would end the whole test process).
@Suite("Hostile provider replies")
struct HostileReplyTests {
    let now = 1_800_000_000.0
    let key = TokenKey(kind: "vehicle", id: "v-1")
    let acceptance = TokenAcceptance()

    /// Every value at and past the edges, as JSON number text.
    static let edgeNumbers = [
        "0", "-1", "-0", "0.5", "1e-300", "-1e300", "1e300", "1e308", "1e309", "1e400", "-1e400",
        "18446744073709551615", "18446744073709551616", "9223372036854775807", "9223372036854775808",
        "253402300799", "253402300799000", "1800003600000000", "1800003600000000000", "1800003600.999",
        "99999999999999999999999999999999999999",
    ]
    /// The same as strings (some providers quote numbers), with what `Double` also reads.
    static let edgeStrings = edgeNumbers + ["nan", "NaN", "inf", "-inf", "infinity", "+1e999", "0x1p1023", ""]

    /// What must hold for any reply: a clear provider error, or a token whose expiry lies ahead
    /// and within the kind's longest lifetime.
    private func judge(_ body: String, contentType: String = "application/json", headerExpiry: Double? = nil)
        -> String
    {
        do {
            let (token, expiresAt) = try ProviderReply().read(
                body: Array(body.utf8),
                contentType: contentType,
                headerExpiry: headerExpiry,
                now: now
            )
            let fetched = try acceptance.accept(token: token, expiresAt: expiresAt, for: key, now: now)
            let left = fetched.expiresAt.seconds - now
            guard left > 0, left <= TokenAcceptance.defaultMaxLifetime else { return "unbounded: \(left)" }
            return "ok"
        } catch is ProviderError {
            return "refused"
        } catch {
            return "unexpected error \(error)"
        }
    }

    private func jwt(exp: String, authorization: String = #"{"vehicleid":"v-1"}"#) -> String {
        let payload = #"{"exp":\#(exp),"authorization":\#(authorization)}"#
        return makeRawJWT(payload: payload)
    }

    @Test func everyExpiryShapeAtTheEdgesIsRefusedOrBounded() {
        let token = jwt(exp: "\(Int(now) + 600)")
        for value in Self.edgeNumbers {
            for field in ["expiration", "expires_at", "expirationTimestamp", "expiration_timestamp_ms", "expires_in"] {
                let outcome = judge(#"{"token":"opaque-token","\#(field)":\#(value)}"#)
                #expect(outcome == "ok" || outcome == "refused", "\(field)=\(value): \(outcome)")
                let jwtOutcome = judge(#"{"token":"\#(token)","\#(field)":\#(value)}"#)
                #expect(jwtOutcome == "ok" || jwtOutcome == "refused", "\(field)=\(value) with a JWT: \(jwtOutcome)")
            }
            let jwtOnly = judge(#"{"token":"\#(jwt(exp: value))"}"#)
            #expect(jwtOnly == "ok" || jwtOnly == "refused", "exp=\(value): \(jwtOnly)")
        }
        for text in Self.edgeStrings {
            for field in ["expiration", "expires_in"] {
                let outcome = judge(#"{"token":"opaque-token","\#(field)":"\#(text)"}"#)
                #expect(outcome == "ok" || outcome == "refused", "\(field)=\"\(text)\": \(outcome)")
            }
        }
        for date in [
            "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "1970-01-01T00:00:00.5Z", "+275760-09-13T00:00:00Z",
        ] {
            let outcome = judge(#"{"token":"opaque-token","expiration":"\#(date)"}"#)
            #expect(outcome == "ok" || outcome == "refused", "expiration=\(date): \(outcome)")
        }
    }

    @Test func farExpiriesAreBroughtBackToTheLongestLifetime() throws {
        for exp in ["1e300", "253402300799", "\(Int64(now) * 1000 + 600_000)", "9223372036854775807"] {
            let fetched = try acceptance.accept(token: jwt(exp: exp), expiresAt: nil, for: key, now: now)
            #expect(fetched.expiresAt.seconds == now + TokenAcceptance.defaultMaxLifetime, "exp \(exp)")
        }
        // A kind's own max_lifetime.
        let hourly = TokenAcceptance(maxLifetimes: ["vehicle": 3600])
        let far = try hourly.accept(token: "opaque", expiresAt: now + 1e12, for: key, now: now)
        #expect(far.expiresAt.seconds == now + 3600)
        let near = try hourly.accept(token: "opaque", expiresAt: now + 60, for: key, now: now)
        #expect(near.expiresAt.seconds == now + 60, "an expiry within it is kept")
    }

    @Test func expiriesThatAreNotFiniteOrNotAheadAreRefused() {
        for bad in [Double.nan, .infinity, -.infinity, 0, -1, now - 0.5, now] {
            #expect(throws: ProviderError.self, "\(bad)") {
                try acceptance.accept(token: "opaque", expiresAt: bad, for: key, now: now)
            }
        }
        #expect(
            throws: ProviderError.failed(
                "token's claims are ambiguous: exp is not a finite number (token \(TokenFingerprint.of(jwt(exp: "1e400"))))"
            )
        ) {
            try acceptance.accept(token: jwt(exp: "1e400"), expiresAt: now + 60, for: key, now: now)
        }
        // Found by the cache-snapshot fuzzer: a number past a Double's range in any claim makes
        // Foundation's (and Go's) reader refuse the whole payload, so the token is refused too.
        for claim in [#""x":1e400"#, #""x":[1,{"y":-1e400}]"#, #""iat":1e309"#] {
            let payload = #"{"exp":1800000600,"authorization":{"vehicleid":"v-1"},"# + claim + "}"
            #expect(throws: ProviderError.self, "\(claim)") {
                try acceptance.accept(token: makeRawJWT(payload: payload), expiresAt: now + 60, for: key, now: now)
            }
        }
        for exp in [#""1800000600""#, "null", "true", "[1800000600]"] {
            #expect(throws: ProviderError.self, "exp \(exp)") {
                try acceptance.accept(token: jwt(exp: exp), expiresAt: now + 60, for: key, now: now)
            }
        }
    }

    @Test func cacheControlAndExpiresHeadersAtTheEdges() {
        for maxAge in ["inf", "-1", "1.5", "1e9", "nan", "", "+5", "0x10", " 5"] {
            #expect(
                ProviderReply.expiry(cacheControl: "max-age=\(maxAge)", expires: nil, now: now) == nil,
                "max-age=\(maxAge) is not delta-seconds"
            )
        }
        #expect(ProviderReply.expiry(cacheControl: "max-age=600", expires: nil, now: now) == now + 600)
        #expect(ProviderReply.expiry(cacheControl: "no-store, Max-Age=0", expires: nil, now: now) == now)
        let huge = String(repeating: "9", count: 400)
        #expect(ProviderReply.expiry(cacheControl: "max-age=\(huge)", expires: nil, now: now) == now + 2_147_483_648)
        for expires in [
            "Fri, 31 Dec 9999 23:59:59 GMT", "Thu, 01 Jan 1970 00:00:00 GMT", "Mon, 01 Jan 0001 00:00:00 GMT",
            "garbage",
        ] {
            let header = ProviderReply.expiry(cacheControl: nil, expires: expires, now: now)
            let outcome = judge("opaque-token", contentType: "text/plain", headerExpiry: header)
            #expect(outcome == "ok" || outcome == "refused", "Expires: \(expires): \(outcome)")
        }
        let year9999 = ProviderReply.expiry(cacheControl: nil, expires: "Fri, 31 Dec 9999 23:59:59 GMT", now: now)
        #expect(
            judge("opaque-token", contentType: "text/plain", headerExpiry: year9999) == "ok",
            "bounded, not refused"
        )
    }

    /// The issue's list of claims that a lenient reading accepted for `GET vehicle v-1`.
    static let ambiguousAuthorizations = [
        #"{"vehicleid":"other","vehicleid":"v-1"}"#,
        #"{"vehicleid":"v-1","vehicleid":"other"}"#,
        #"{"vehicleid":"other","VehicleId":"v-1"}"#,
        #"{"VehicleId":"v-1","vehicleid":"other"}"#,
        #"{"vehicleid":["other"]}"#,
        #"{"vehicleid":["v-1"]}"#,
        #"{"vehicleid":{"id":"v-1"}}"#,
        #"{"vehicleid":null}"#,
        #"{"vehicleid":1}"#,
        #"{"vehicleid":"v-1","tripid":"*"}"#,
        #"{"tripid":"*"}"#,
        #"{"vehicleid":"*"}"#,
        #""vehicleid=other""#,
        #""vehicleid=v-1""#,
        #"["vehicleid","v-1"]"#,
        "null",
        #"{}"#,
        #"{"tripid":"t-1"}"#,
    ]

    @Test func ambiguousOrWildcardClaimsAreRefusedAsWrongIdTokens() {
        for authorization in Self.ambiguousAuthorizations {
            let token = jwt(exp: "\(Int(now) + 600)", authorization: authorization)
            #expect(throws: ProviderError.self, "\(authorization)") {
                try acceptance.accept(token: token, expiresAt: nil, for: key, now: now)
            }
            do {
                _ = try acceptance.accept(token: token, expiresAt: nil, for: key, now: now)
            } catch let error as ProviderError {
                guard case .rejected(let text) = error else {
                    Issue.record("\(authorization): \(error) is not a refusal of the id")
                    continue
                }
                #expect(text.contains("(token \(TokenFingerprint.of(token)))"), "names the token by fingerprint")
                #expect(!text.contains(token), "never the token itself")
            } catch {
                Issue.record("\(authorization): \(error)")
            }
        }
        // A claim given twice at the top level is as ambiguous.
        let payload = #"{"exp":1800000600,"authorization":{"vehicleid":"v-1"},"authorization":{"vehicleid":"*"}}"#
        let twice = makeRawJWT(payload: payload)
        #expect(throws: ProviderError.self) { try acceptance.accept(token: twice, expiresAt: nil, for: key, now: now) }
    }

    /// An HTTP provider signs as the operator likes (RS256, ES256, HS256), but an unsigned token
    /// or one whose header readers may read differently fails the fetch, named.
    @Test func anUnsignedTokenOrAHeaderThatIsNotStrictJSONIsRefused() throws {
        let payload = #"{"exp":1800000600,"authorization":{"vehicleid":"v-1"}}"#
        for header in [
            #"{"alg":"RS256","kid":"k","typ":"JWT"}"#, #"{"alg":"HS256"}"#, #"{"alg":"ES256","typ":"JWT"}"#,
        ] {
            let token = makeRawJWT(payload: payload, header: header)
            #expect(throws: Never.self, "\(header)") {
                try acceptance.accept(token: token, expiresAt: nil, for: key, now: now)
            }
        }
        let refused: [(header: String, signature: String, problem: String)] = [
            (#"{"alg":"none","typ":"JWT"}"#, "", "says alg none"),
            (#"{"alg":"NONE"}"#, "c2ln", "says alg NONE"),
            (#"{"alg":"nOnE"}"#, "", "says alg nOnE"),
            ("RS256", "c2ln", "is not a strict-JSON object"),
            (#"{"alg":"RS256",}"#, "c2ln", "is not a strict-JSON object"),
            (#"{"alg":"RS256"} x"#, "c2ln", "is not a strict-JSON object"),
            (#"["alg","RS256"]"#, "c2ln", "is not a strict-JSON object"),
            (#"{"alg":"RS256","alg":"none"}"#, "c2ln", "gives alg twice"),
            (#"{"typ":"JWT"}"#, "c2ln", "has no alg"),
            (#"{"alg":null}"#, "c2ln", "has an alg that is not a string"),
        ]
        for (header, signature, problem) in refused {
            let token = makeRawJWT(payload: payload, header: header, signature: signature)
            do {
                _ = try acceptance.accept(token: token, expiresAt: nil, for: key, now: now)
                Issue.record("\(header): accepted")
            } catch let ProviderError.failed(text) {
                #expect(text.hasPrefix("token's header \(problem)"), "\(header): \(text)")
                #expect(text.hasSuffix("(token \(TokenFingerprint.of(token)))"), "\(header): \(text)")
                #expect(!text.contains(token), "the token's text in the error")
            } catch {
                Issue.record("\(header): \(error)")
            }
        }
        // Opaque tokens (not three parts, or no part an object) are not JWTs and pass as before.
        for token in ["opaque-token", "a.b", "a.b.c.d.e", "ya29.a0AfH6SMB.x", "bm90IGpzb24.bm9wZQ.c2ln"] {
            #expect(throws: Never.self, "\(token)") {
                try acceptance.accept(token: token, expiresAt: now + 60, for: key, now: now)
            }
        }
    }

    @Test func aJWTTheStrictReaderCannotReadIsRefusedNotTakenForOpaque() {
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        let payloads = [
            #"{"exp":1800000600,"authorization":{"vehicleid":"*"},"pad":\#(deep)}"#,
            #"{"exp":1800000600,"authorization":{"vehicleid":"*"},"x":"\ud800"}"#,
            #"{"exp":1800000600,"authorization":{"vehicleid":"*"},}"#,
            "\u{FEFF}" + #"{"exp":1800000600,"authorization":{"vehicleid":"*"}}"#,
            #"{"exp":1800000600,"authorization":{"vehicleid":"*"}} trailing"#,
        ]
        for payload in payloads {
            let token = makeRawJWT(payload: payload)
            #expect(JWTClaims(token: token) == nil, "the strict reader does not read \(payload.prefix(60))")
            #expect(JWTClaims.looksLikeJWT(token))
            #expect(throws: ProviderError.self, "\(payload.prefix(60))") {
                try acceptance.accept(token: token, expiresAt: now + 60, for: key, now: now)
            }
        }
        let unreadablePayload = JWTClaims.base64URLEncode(Array(#"{"alg":"RS256"}"#.utf8)) + ".!!!.c2ln"
        #expect(throws: ProviderError.self) {
            try acceptance.accept(token: unreadablePayload, expiresAt: now + 60, for: key, now: now)
        }
        // Opaque tokens that merely have dots are still opaque.
        for opaque in ["a.b.c", "opaque.token.text", "ya29.a0AfH6SMB.x"] {
            #expect(!JWTClaims.looksLikeJWT(opaque))
            #expect(throws: Never.self) {
                try acceptance.accept(token: opaque, expiresAt: now + 60, for: key, now: now)
            }
        }
    }

    @Test func entryNamesThatAreNotPrintableASCIIAreAmbiguous() {
        for authorization in [
            #"{"vehicleid":"v-1","vehic\u212Aeid":"v-2"}"#, #"{"taskid":"t-1","tas\u212Aid":"t-2","vehicleid":"v-1"}"#,
            #"{"vehicleid":"v-1","vehicleid\u0000":"other"}"#, #"{"vehicleid":"v-1","vehicle id":"other"}"#,
        ] {
            let token = jwt(exp: "\(Int(now) + 600)", authorization: authorization)
            #expect(throws: ProviderError.self, "\(authorization)") {
                try acceptance.accept(token: token, expiresAt: nil, for: key, now: now)
            }
        }
    }

    @Test func acceptWildcardLetsWildcardTokensThroughForThatKindOnly() throws {
        let wildcards = TokenAcceptance(wildcardKinds: ["vehicle"])
        for authorization in [#"{"vehicleid":"*"}"#, #"{"vehicleid":"v-1","tripid":"*"}"#, #"{"tripid":"t-1"}"#, "{}"] {
            let token = jwt(exp: "\(Int(now) + 600)", authorization: authorization)
            _ = try wildcards.accept(token: token, expiresAt: nil, for: key, now: now)
        }
        let wildcard = jwt(exp: "\(Int(now) + 600)", authorization: #"{"tripid":"*"}"#)
        #expect(throws: ProviderError.self, "trip is not a wildcard kind") {
            try wildcards.accept(token: wildcard, expiresAt: nil, for: TokenKey(kind: "trip", id: "t-1"), now: now)
        }
        for authorization in [#"{"vehicleid":"other","vehicleid":"v-1"}"#, #"{"vehicleid":"other"}"#, #""x""#] {
            let token = jwt(exp: "\(Int(now) + 600)", authorization: authorization)
            #expect(throws: ProviderError.self, "still refused with accept_wildcard: \(authorization)") {
                try wildcards.accept(token: token, expiresAt: nil, for: key, now: now)
            }
        }
    }

    @Test func strictJSONKeepsDuplicatesAndRefusesWhatIsNotJSON() throws {
        let object = try #require(
            StrictJSON(bytes: Array(#" {"a":1,"a":"x","b":[true,false,null],"c\u0041":"\ud83d\ude9a"} "#.utf8))
        )
        #expect(object.members?.map(\.name) == ["a", "a", "b", "cA"])
        #expect(object.members?[3].value == .string("🚚"))
        #expect(StrictJSON(bytes: Array("1e400".utf8)) == .number(.infinity))
        let notJSON = [
            "", "{", "{\"a\":1,}", "[1,]", "{a:1}", "'x'", "\"\u{1}\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\x\"",
            "01", "1.", ".5", "+1", "NaN", "Infinity", "-", "1e", "{\"a\":1} x", "tru", "nul",
            String(repeating: "[", count: 33) + String(repeating: "]", count: 33),
        ]
        for text in notJSON {
            #expect(StrictJSON(bytes: Array(text.utf8)) == nil, "\(text.debugDescription)")
        }
        #expect(StrictJSON(bytes: [0x22, 0xFF, 0x22]) == nil, "not UTF-8")
        let deep = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
        #expect(StrictJSON(bytes: Array(deep.utf8)) != nil, "32 levels are read")
        let hostile = String(repeating: "[", count: 100_000)
        #expect(StrictJSON(bytes: Array(hostile.utf8)) == nil, "deep nesting is refused, not a stack overflow")
    }
}
