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
}
