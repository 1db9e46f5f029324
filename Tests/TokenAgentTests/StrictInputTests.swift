import Foundation
import Testing
import TokenAgent
import TokenWire

/// One strict path for bytes from outside (issue 33 §5): a provider's reply, the config file and an
/// issuer's key file are read by `StrictJSON`, and a name given twice, at any depth, is refused
/// naming it (Foundation's reader silently kept the last); base64url from outside is read by
/// `StrictBase64URL` alone, so `+`, `/` and `=` (padding included) are refused in a JWT's header
/// and payload.
@Suite("Strict input")
struct StrictInputTests {
    let now = 1_800_000_000.0
    let key = TokenKey(kind: "vehicle", id: "v-1")

    private func read(_ body: String, _ reader: ProviderReply = ProviderReply()) throws -> (String, Double?) {
        let read = try reader.read(body: Array(body.utf8), contentType: "application/json", now: now)
        return (read.token, read.expiresAt)
    }

    // MARK: Provider replies

    @Test func aProviderReplyThatGivesANameTwiceIsRefusedNamingIt() throws {
        let cases: [(body: String, name: String)] = [
            (#"{"token":"a","token":"b","expires_in":60}"#, "token"),
            (#"{"token":"a","expires_in":60,"expires_in":86400}"#, "expires_in"),
            (#"{"token":"a","expiration":1800000060,"expiration":1900000000}"#, "expiration"),
            (#"{"token":"a","expires_in":60,"meta":{"id":"x","id":"y"}}"#, "meta.id"),
            (#"{"token":"a","expires_in":60,"list":[{"k":1},{"k":1,"k":2}]}"#, "list.1.k"),
            (#"{"jwt":"a","unread":1,"unread":2,"expires_in":60}"#, "unread"),
        ]
        for (body, name) in cases {
            #expect(throws: ProviderError.failed("reply gives field \(name) twice"), "\(body)") {
                try read(body)
            }
        }
        // Two spellings of one name (`K` and the Kelvin sign) are the same name to some readers.
        let configured = ProviderReply(tokenField: "VEHICLE_TOKEN_KEY")
        let kelvin = #"{"VEHICLE_TOKEN_KEY":"a","VEHICLE_TOKEN_\#u{212A}EY":"b","expires_in":60}"#
        #expect(throws: ProviderError.failed("reply gives field VEHICLE_TOKEN_???EY twice")) {
            try read(kelvin, configured)
        }
        // Every name once: read as before, nested objects and all.
        let once = #"{"token":"a","expires_in":60,"meta":{"id":"x"},"list":[{"k":1},{"k":2}]}"#
        #expect(try read(once) == ("a", now + 60))
    }

    @Test func aTwiceGivenJWTIsRefusedWhicheverCopyWouldBeTheRightOne() throws {
        let other = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "v-2"]])
        let mine = makeJWT(["exp": now + 600, "authorization": ["vehicleid": "v-1"]])
        for body in [#"{"token":"\#(other)","token":"\#(mine)"}"#, #"{"token":"\#(mine)","token":"\#(other)"}"#] {
            #expect(throws: ProviderError.failed("reply gives field token twice")) { try read(body) }
        }
    }

    // MARK: The config file and key files

    @Test func aConfigFileThatGivesAKeyTwiceIsRefusedNamingIt() {
        let cases: [(json: String, key: String)] = [
            (#"{"refresh_margin": 60, "refresh_margin": 600}"#, "refresh_margin"),
            (#"{"providers": {"vehicle": {"url": "http://p/{id}", "url": "http://q/{id}"}}}"#, "providers.vehicle.url"),
            (
                #"{"providers": {"vehicle": {"url": "http://p/{id}"}, "vehicle": {"url": "http://q/{id}"}}}"#,
                "providers.vehicle"
            ),
            (#"{"issuers": {"trip": {"key_file": "/a.json", "key_file": "/b.json"}}}"#, "issuers.trip.key_file"),
            (#"{"allow": {"vehicle": {"users": ["a"], "users": ["b"]}}}"#, "allow.vehicle.users"),
            // Even where an unknown key would be refused too: the repeated key is named first.
            (#"{"refresh_margn": 1, "socket": "/a", "socket": "/b"}"#, "socket"),
        ]
        for (json, key) in cases {
            #expect(throws: ConfigurationError(key: key, "appears twice"), "\(json)") {
                try ConfigurationFile.parse(Data(json.utf8), over: AgentConfiguration())
            }
        }
        #expect(
            ConfigurationError(key: "socket", "appears twice").description
                == "configuration key socket: appears twice"
        )
    }

    /// The config is decoded from the one strict read: errors name the same keys as before.
    @Test func theConfigFileIsDecodedFromItsStrictReadWithTheSameErrors() throws {
        func problem(_ json: String) -> ConfigurationError? {
            do {
                _ = try ConfigurationFile.parse(Data(json.utf8), over: AgentConfiguration())
                return nil
            } catch {
                return error as? ConfigurationError
            }
        }
        #expect(
            problem(#"{"max_entries": "many"}"#) == ConfigurationError(key: "max_entries", "must be of type number")
        )
        #expect(problem(#"{"socket": null}"#) == nil, "null is no value, as before")
        #expect(
            problem(#"{"shared_memory": 1}"#) == ConfigurationError(key: "shared_memory", "must be of type boolean")
        )
        #expect(
            problem(#"{"providers": {"trip": "x"}}"#)
                == ConfigurationError(key: "providers.trip", "must be of type object")
        )
        #expect(
            problem(#"{"providers": {"trip": {"timeout": 3}}}"#)
                == ConfigurationError(key: "providers.trip.url", "is required")
        )
        #expect(
            problem(#"{"providers": {"trip": {"url": "http://x/{id}", "expiry_mode": "sideways"}}}"#)
                == ConfigurationError(
                    key: "providers.trip.expiry_mode",
                    "Cannot initialize ExpiryMode from invalid String value sideways"
                )
        )
        #expect(
            problem(#"{"allow": {"vehicle": {"users": ["worker", " "]}}}"#)
                == ConfigurationError(key: "allow.vehicle.users.1", "must be a user or group name, or a number")
        )
        #expect(problem(#"{"refresh_margin": 1e400}"#)?.key == "refresh_margin", "not a finite number")
        #expect(problem("1")?.key == "config")
        #expect(
            problem(#"{"a": 1,}"#)
                == ConfigurationError(key: "config", "not valid JSON: line 1, column 9: unexpected '}'")
        )
        let configuration = try ConfigurationFile.parse(
            Data(#"{"socket_group": 1234, "allow": {"vehicle": {"users": ["worker", 1001], "groups": []}}}"#.utf8),
            over: AgentConfiguration()
        )
        #expect(configuration.socketGroup == "1234")
        #expect(configuration.access.allow["vehicle"]?.users == [.name("worker"), .number(1001)])
    }

    /// A syntax error in a file a person wrote names its line and column and what is there.
    @Test func aConfigFileSyntaxErrorNamesItsLineAndColumn() {
        func message(_ json: String) -> String? {
            do {
                _ = try ConfigurationFile.parse(Data(json.utf8), over: AgentConfiguration())
                return nil
            } catch {
                return (error as? ConfigurationError)?.description
            }
        }
        let cases: [(json: String, says: String)] = [
            // The trailing comma a person leaves after the last provider.
            (
                "{\n  \"providers\": {\n    \"vehicle\": {\"url\": \"http://p/{id}\"},\n  }\n}\n",
                "line 4, column 3: unexpected '}'"
            ),
            ("{\"a\": 1", "line 1, column 8: unexpected end of input"),
            ("{\"a\": \"b\n\"}", "line 1, column 9: unexpected a control character"),
            ("{\"a\": tru}", "line 1, column 7: unexpected 't'"),
            ("{\"é\": 1 \"b\": 2}", "line 1, column 9: unexpected '\"'"),
            ("{\"a\": 1}\n\nx", "line 3, column 1: unexpected 'x'"),
            ("{\"a\": 1, é}", "line 1, column 10: unexpected 'é'"),
            ("", "line 1, column 1: unexpected end of input"),
        ]
        for (json, says) in cases {
            #expect(message(json) == "configuration key config: not valid JSON: \(says)", "\(json)")
        }
        // A byte that is not UTF-8, inside a string: its own position.
        let broken: [UInt8] = Array("{\"ab".utf8) + [0xFF] + Array("\": 1}".utf8)
        guard case .failure(let error) = StrictJSON.parse(bytes: broken) else {
            Issue.record("not refused")
            return
        }
        #expect(error.description == "line 1, column 5: unexpected a byte that is not UTF-8")
        #expect(error.offset == 4)
        #expect(StrictJSON(bytes: Array("{\"a\": [1, 2]}".utf8)) != nil, "valid JSON still reads")
    }

    /// A key file's syntax error names its place but never what is there.
    @Test func aKeyFileSyntaxErrorNamesItsPlaceButNotItsText() {
        let json = "{\"private_key\": \"-----BEGIN PRIVATE KEY-----SECRETBYTES\",\n}"
        do {
            _ = try LocalIssuer(serviceAccountJSON: Data(json.utf8))
            Issue.record("a key file with a trailing comma was read")
        } catch {
            #expect("\(error)" == "not a service-account key: not valid JSON at line 2, column 1")
        }
    }

    @Test func anIssuerKeyFileThatGivesANameTwiceIsRefusedNamingIt() {
        let json =
            #"{"private_key":"x","private_key_id":"k-1","client_email":"a@p.iam.gserviceaccount.com","#
            + #""client_email":"b@p.iam.gserviceaccount.com"}"#
        do {
            _ = try LocalIssuer(serviceAccountJSON: Data(json.utf8))
            Issue.record("a key file giving client_email twice was read")
        } catch {
            #expect("\(error)" == "not a service-account key: client_email appears twice")
        }
    }

    // MARK: base64url

    /// `json(filler)` as unpadded base64url, with as many `filler` characters as it takes for the
    /// encoding to hold `wanted`.
    private func encoded(_ json: (String) -> String, filler: Character, holding wanted: Character) throws -> String {
        for count in 0..<12 {
            let text = JWTClaims.base64URLEncode(Array(json(String(repeating: filler, count: count)).utf8))
            if text.contains(wanted) { return text }
        }
        throw CancellationError()
    }

    /// The same bytes as `text`, spelled in base64 (`+`, `/`) or padded: what a lenient reader
    /// decodes as `text`.
    private func respelled(_ text: String) -> [(what: String, text: String)] {
        var spellings: [(String, String)] = []
        if text.contains("-") { spellings.append(("+ for -", text.replacingOccurrences(of: "-", with: "+"))) }
        if text.contains("_") { spellings.append(("/ for _", text.replacingOccurrences(of: "_", with: "/"))) }
        if text.count % 4 != 0 {
            spellings.append(("padding", text + String(repeating: "=", count: 4 - text.count % 4)))
        }
        return spellings
    }

    @Test func aJWTHeaderOrPayloadInBase64OrPaddedIsRefused() throws {
        let header = { (pad: String) in #"{"alg":"RS256","typ":"JWT","x":"\#(pad)"}"# }
        let payload = { (pad: String) in #"{"exp":1800000600,"authorization":{"vehicleid":"v-1"},"x":"\#(pad)"}"# }
        let plainHeader = JWTClaims.base64URLEncode(Array(header("").utf8))
        let plainPayload = JWTClaims.base64URLEncode(Array(payload("").utf8))
        // Strict spellings are read as before.
        for (filler, wanted) in [("?", "_"), (">", "-")] as [(Character, Character)] {
            let strictHeader = try encoded(header, filler: filler, holding: wanted)
            let strictPayload = try encoded(payload, filler: filler, holding: wanted)
            for token in [strictHeader + "." + plainPayload + ".c2ln", plainHeader + "." + strictPayload + ".c2ln"] {
                #expect(JWTClaims(token: token) != nil)
                #expect(throws: Never.self) {
                    try TokenAcceptance().accept(token: token, expiresAt: nil, for: key, now: now)
                }
            }
            // The same bytes, spelled as only a lenient reader reads them: the header fails the
            // fetch, naming why; a payload makes the token a refusal, never an opaque token.
            for (what, header) in respelled(strictHeader) {
                let token = header + "." + plainPayload + ".c2ln"
                #expect(JWTClaims(token: token) == nil, "header \(what)")
                #expect(
                    throws: ProviderError.failed(
                        "token's header is not strict base64url (unpadded, without +, / or =) (token \(TokenFingerprint.of(token)))"
                    ),
                    "header \(what)"
                ) { try TokenAcceptance().accept(token: token, expiresAt: nil, for: key, now: now) }
            }
            for (what, payload) in respelled(strictPayload) {
                let token = plainHeader + "." + payload + ".c2ln"
                #expect(JWTClaims(token: token) == nil, "payload \(what)")
                #expect(JWTClaims.looksLikeJWT(token), "payload \(what)")
                #expect(
                    throws: ProviderError.rejected(
                        "token's claims cannot be read strictly (token \(TokenFingerprint.of(token)))"
                    ),
                    "payload \(what)"
                ) { try TokenAcceptance().accept(token: token, expiresAt: nil, for: key, now: now) }
            }
        }
        // Padding was tried for both parts above (neither encodes to a multiple of 4).
        #expect(plainHeader.count % 4 != 0 || plainPayload.count % 4 != 0)
    }

    @Test func aProviderReplyWhoseJWTIsInBase64IsNotServed() throws {
        let payload = { (pad: String) in #"{"exp":1800000600,"authorization":{"vehicleid":"v-1"},"x":"\#(pad)"}"# }
        let header = JWTClaims.base64URLEncode(Array(#"{"alg":"RS256","typ":"JWT"}"#.utf8))
        let strict = try encoded(payload, filler: "?", holding: "_")
        let lenient = header + "." + strict.replacingOccurrences(of: "_", with: "/") + ".c2ln"
        for body in [#"{"token":"\#(lenient)","expires_in":60}"#, lenient] {
            do {
                let (token, expiresAt) = try read(body)
                _ = try TokenAcceptance().accept(token: token, expiresAt: expiresAt, for: key, now: now)
                Issue.record("served a JWT whose payload is base64, not base64url: \(body.prefix(40))")
            } catch is ProviderError {
                continue
            }
        }
    }

    @Test func strictBase64URLTakesOneSpellingOfEachByteString() {
        #expect(StrictBase64URL.decode("") == [])
        #expect(StrictBase64URL.decode("YQ") == Array("a".utf8))
        #expect(StrictBase64URL.decode("YWI") == Array("ab".utf8))
        #expect(StrictBase64URL.decode("YWJj") == Array("abc".utf8))
        #expect(StrictBase64URL.decode("-_8") == [0xFB, 0xFF])
        for text in ["+/8", "-/8", "+_8", "YQ==", "YQ=", "YWI=", "Y=Q", "YQ=A", "=YQ", "YR", "Y", "YW Jj", "YWJj\n"] {
            #expect(StrictBase64URL.decode(text) == nil, "\(text.debugDescription)")
        }
    }
}
