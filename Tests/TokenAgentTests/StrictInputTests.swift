import Foundation
import Testing
import TokenAgent

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
        #expect(problem(#"{"a": 1,}"#) == ConfigurationError(key: "config", "not valid JSON"))
        let configuration = try ConfigurationFile.parse(
            Data(#"{"socket_group": 1234, "allow": {"vehicle": {"users": ["worker", 1001], "groups": []}}}"#.utf8),
            over: AgentConfiguration()
        )
        #expect(configuration.socketGroup == "1234")
        #expect(configuration.access.allow["vehicle"]?.users == [.name("worker"), .number(1001)])
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
}
