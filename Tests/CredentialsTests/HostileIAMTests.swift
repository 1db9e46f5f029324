import FakeGoogle
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing
import TokenAgent

/// The real monotonic clock with a wall clock the test can step, as NTP or an operator does.
final class SteppedWallClock: AgentClock, Sendable {
    private let step = Mutex(0.0)
    private let advanced = Mutex(0.0)
    private let fixedWall: Double?
    private let system = SystemAgentClock()

    /// A clock whose wall clock reads `fixedWall` (plus steps) when given, else the real one.
    init(fixedWall: Double? = nil) { self.fixedWall = fixedWall }

    var monotonicSeconds: Double { system.monotonicSeconds + advanced.withLock { $0 } }
    var wallSeconds: Double { (fixedWall ?? system.wallSeconds) + step.withLock { $0 } }

    /// Steps the wall clock by `seconds` (back when negative); the monotonic clock does not move.
    func stepWall(_ seconds: Double) { step.withLock { $0 += seconds } }

    /// Lets `seconds` pass on both clocks at once, without waiting for them.
    func advance(_ seconds: Double) {
        advanced.withLock { $0 += seconds }
        step.withLock { $0 += seconds }
    }
}

/// The key-less signer and the host's credentials against hostile replies: what IAM, the metadata
/// server and the token endpoint send is never trusted beyond what was asked for.
@Suite("Hostile IAM and credentials")
struct HostileIAMTests {
    /// A signer for ``account`` at `fake`'s IAM, on a wall clock fixed at `now` (and a quarter second),
    /// with the host's access tokens from `fake`'s metadata server.
    private static func signer(
        of fake: FakeGoogle,
        at now: Int,
        tuning: HostAccessTokenSource.Tuning
    ) throws -> (IAMSigner, any AccessTokenSource) {
        let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost), tuning: tuning)
        let signer = IAMSigner(
            account: account,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            lifetime: 1800,
            credentials: source,
            clock: SteppedWallClock(fixedWall: Double(now) + 0.25)
        )
        return (signer, source)
    }

    static let account = FakeGoogle.defaultSigningAccount

    /// `bytes` as unpadded base64url.
    static func base64URL(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// A signature of Google's length (2048-bit RSA), in base64url; its value is not the agent's to check.
    static let signature = base64URL((0..<256).map { UInt8($0) })

    /// A JWT-shaped token whose payload is exactly `payload`, under `header`, with `signature`.
    static func jwt(
        payload: String,
        header: String = #"{"alg":"RS256","kid":"k-1","typ":"JWT"}"#,
        signature: String = HostileIAMTests.signature
    ) -> String {
        base64URL(Array(header.utf8)) + "." + base64URL(Array(payload.utf8)) + "." + signature
    }

    @Test func aSignedJwtWithARepeatedOrExtraClaimIsNeverServed() async throws {
        let now = 1_800_000_000
        let fake = try await FakeGoogle.start()
        let (signer, source) = try Self.signer(of: fake, at: now, tuning: HostAccessTokenSource.Tuning())
        let account = Self.account
        let fleetEngine = "https://fleetengine.googleapis.com/"
        let rest =
            #""aud":"\#(fleetEngine)","exp":\#(now + 1800),"iat":\#(now),"#
            + #""iss":"\#(account)","sub":"\#(account)""#
        let cases: [(String, Bool, String)] = [
            ("{\(rest),\"authorization\":{\"vehicleid\":\"v-1\"}}", true, "the claims asked for"),
            (
                "{ \"sub\" : \"\(account)\", \"authorization\" : { \"vehicleid\" : \"v-1\" }, \"iss\":\"\(account)\","
                    + "\"iat\":\(now),\"exp\":\(now + 1800),\"aud\":\"https:\\/\\/fleetengine.googleapis.com\\/\"}",
                true, "the same claims, in another order and spelling"
            ),
            (
                "{\(rest),\"authorization\":{\"vehicleid\":\"v-1\"},\"authorization\":{\"vehicleid\":\"v-2\"}}",
                false, "authorization twice, the one asked for first"
            ),
            (
                "{\(rest),\"authorization\":{\"vehicleid\":\"v-1\",\"vehicleid\":\"v-2\"}}",
                false, "vehicleid twice"
            ),
            ("{\(rest),\"authorization\":{\"vehicleid\":\"v-1\"},\"scope\":\"admin\"}", false, "an extra claim"),
            (
                "{\(rest),\"authorization\":{\"vehicleid\":\"v-1\"},\"iss\":\"other@evil.iam.gserviceaccount.com\"}",
                false, "iss twice"
            ),
            (
                "{\(rest),\"authorization\":{\"vehicleid\":\"cafe\u{301}\"}}", false,
                "another id, canonically equivalent to the one asked for (caf\u{E9})"
            ),
        ]
        for (payload, served, what) in cases {
            let id = what.hasPrefix("another id") ? "caf\u{E9}" : "v-1"
            let reply = Array(#"{"keyId":"k-1","signedJwt":"\#(Self.jwt(payload: payload))"}"#.utf8)
            fake.inject(.raw(status: 200, body: reply), into: .iamCredentials)
            do {
                let fetched = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: id))
                #expect(served, "\(what): served")
                #expect(fetched.token == Self.jwt(payload: payload))
            } catch let error as ProviderError {
                #expect(!served, "\(what): \(error)")
                #expect(error == .failed("IAM signJwt returned a token whose claims are not those asked for"))
            }
        }
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }

    /// Every reply here is refused as IAM's fault, naming what is wrong; the control is served.
    @Test func aSignedJwtWhoseHeaderKeyIdOrSignatureIsNotGooglesIsNeverServed() async throws {
        let now = 1_800_000_000
        let fake = try await FakeGoogle.start()
        let (signer, source) = try Self.signer(of: fake, at: now, tuning: fastTuning)
        let account = Self.account
        let payload =
            #"{"aud":"https://fleetengine.googleapis.com/","exp":\#(now + 1800),"iat":\#(now),"#
            + #""iss":"\#(account)","sub":"\#(account)","authorization":{"vehicleid":"v-1"}}"#
        func header(_ members: String) -> String { "{" + members + "}" }
        let rs256 = #""alg":"RS256","kid":"k-1","typ":"JWT""#
        let short = Self.base64URL((0..<128).map { UInt8($0) })
        // (what, signedJwt, keyId, a word the error must hold; nil for the control, served)
        let cases: [(String, String, String, String?)] = [
            ("Google's header", Self.jwt(payload: payload), "k-1", nil),
            (
                "alg none, empty signature",
                Self.jwt(payload: payload, header: #"{"alg":"none","typ":"JWT"}"#, signature: ""), "k-1", "alg is none"
            ),
            (
                "HS256", Self.jwt(payload: payload, header: #"{"alg":"HS256","kid":"k-1","typ":"JWT"}"#), "k-1",
                "alg is HS256"
            ),
            (
                "a header that is not JSON", Self.jwt(payload: payload, header: "RS256"), "k-1",
                "not strict base64url JSON"
            ),
            (
                "a header with a trailing comma", Self.jwt(payload: payload, header: header(rs256 + ",")), "k-1",
                "not strict base64url JSON"
            ),
            (
                "jku", Self.jwt(payload: payload, header: header(rs256 + #","jku":"https://evil.example/k""#)), "k-1",
                "jku"
            ),
            (
                "x5u", Self.jwt(payload: payload, header: header(rs256 + #","x5u":"https://evil.example/c""#)), "k-1",
                "x5u"
            ),
            ("jwk", Self.jwt(payload: payload, header: header(rs256 + #","jwk":{"kty":"RSA"}"#)), "k-1", "jwk"),
            ("alg twice", Self.jwt(payload: payload, header: header(rs256 + #","alg":"none""#)), "k-1", "alg twice"),
            ("no typ", Self.jwt(payload: payload, header: #"{"alg":"RS256","kid":"k-1"}"#), "k-1", "no typ"),
            ("typ JWS", Self.jwt(payload: payload, header: #"{"alg":"RS256","kid":"k-1","typ":"JWS"}"#), "k-1", "typ"),
            ("RS256, empty signature", Self.jwt(payload: payload, signature: ""), "k-1", "0 bytes"),
            ("a short signature", Self.jwt(payload: payload, signature: short), "k-1", "128 bytes"),
            ("a padded signature", Self.jwt(payload: payload, signature: Self.signature + "=="), "k-1", "base64url"),
            (
                "a signature in base64, not base64url",
                Self.jwt(payload: payload, signature: "+" + Self.signature.dropFirst()), "k-1",
                "base64url"
            ),
            ("a kid other than the keyId", Self.jwt(payload: payload), "k-2", "kid is not the reply's keyId"),
            ("two parts", Self.jwt(payload: payload) + ".extra", "k-1", "three parts"),
        ]
        for (what, token, keyID, word) in cases {
            let reply = Array(#"{"keyId":"\#(keyID)","signedJwt":"\#(token)"}"#.utf8)
            fake.inject(.raw(status: 200, body: reply), into: .iamCredentials)
            do {
                let fetched = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
                #expect(word == nil, "\(what): served")
                #expect(fetched.token == token)
            } catch let ProviderError.failed(text) {
                #expect(word != nil, "\(what): refused: \(text)")
                #expect(text.hasPrefix("IAM signJwt "), "\(what): \(text)")
                #expect(text.contains(word ?? "-"), "\(what): \(text)")
            }
        }
        // The reply itself is read strictly too: signedJwt twice is ambiguous.
        let token = Self.jwt(payload: payload)
        let twice = #"{"keyId":"k-1","signedJwt":"\#(token)","signedJwt":"\#(token)"}"#
        fake.inject(.raw(status: 200, body: Array(twice.utf8)), into: .iamCredentials)
        await #expect(throws: ProviderError.failed("IAM signJwt reply gives signedJwt twice")) {
            try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
        }
        // So is a name twice in a member Google may add, which the signer does not otherwise read.
        let nested = #"{"keyId":"k-1","signedJwt":"\#(token)","x":{"a":1,"a":2}}"#
        fake.inject(.raw(status: 200, body: Array(nested.utf8)), into: .iamCredentials)
        await #expect(throws: ProviderError.failed("IAM signJwt reply gives x.a twice")) {
            try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
        }
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }

    /// A 403 whose error body gives its reason twice: read leniently, the last one would choose
    /// the operator's fix; read strictly, the fault says the body is ambiguous and gives the
    /// general advice.
    @Test func aSignJwtFaultWhoseBodyGivesANameTwiceSaysSoAndPicksNoFix() async throws {
        let fake = try await FakeGoogle.start()
        let (signer, source) = try Self.signer(of: fake, at: 1_800_000_000, tuning: fastTuning)
        let body =
            #"{"error":{"code":403,"status":"PERMISSION_DENIED","details":[{"reason":"SERVICE_DISABLED","#
            + #""reason":"IAM_PERMISSION_DENIED"}]}}"#
        fake.inject(.raw(status: 403, body: Array(body.utf8)), into: .iamCredentials)
        do {
            _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: "v-1"))
            Issue.record("signed")
        } catch ProviderError.misconfigured(let text, _) {
            #expect(text.contains("HTTP 403 (its error body gives error.details.0.reason twice, so it is not read)"))
            #expect(text.contains("Service Account Token Creator"), "\(text)")
            #expect(!text.contains("roles/iam.serviceAccountTokenCreator") && !text.contains("enable"), "\(text)")
        }
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }

    @Test func aHugeExpiresInIsCachedWithoutTrappingEvenWhenDebugLogging() async throws {
        let fake = try await FakeGoogle.start()
        let log = CapturedLog()
        for expiresIn in ["1e300", "9223372036854775808", "1e19"] {
            let source = try HostCredentials.source(
                for: .metadataServer(host: fake.metadataHost),
                tuning: fastTuning,
                logger: log.logger(level: .debug)
            )
            let body = #"{"access_token":"ya29.hostile","expires_in":\#(expiresIn),"token_type":"Bearer"}"#
            fake.inject(.raw(status: 200, body: Array(body.utf8)), into: .metadata)
            let token = try await source.accessToken()
            #expect(token.value == "ya29.hostile", "expires_in \(expiresIn)")
            #expect(try await source.accessToken() == token, "cached")
            await source.shutdown()
        }
        #expect(log.text.contains("access token fetched"))
        #expect(!log.text.contains("ya29.hostile"), "a token in the log")
        await fake.stop()
    }

    @Test func theFaultHoldLastsItsSecondsWhicheverWayTheWallClockSteps() async throws {
        let fake = try await FakeGoogle.start()
        let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost), tuning: fastTuning)
        let clock = SteppedWallClock()
        let signer = IAMSigner(
            account: Self.account,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            credentials: source,
            faultHold: 2,
            clock: clock
        )
        func held(_ id: String) async throws -> Double? {
            do {
                _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: id))
                return nil
            } catch ProviderError.misconfigured(_, let retryAfter) {
                return retryAfter
            }
        }
        fake.inject(.permissionDenied(.iamPermissionDenied), into: .iamCredentials)
        #expect(try await held("v-1") == 2)
        // A step forward of an hour does not end the hold early ...
        clock.stepWall(3600)
        let left = try await held("v-2")
        #expect(left != nil && left! <= 2, "released by a wall-clock step forward: \(String(describing: left))")
        // ... nor does a step back of two hours make it last for them.
        clock.stepWall(-7200)
        let stillLeft = try await held("v-3")
        #expect(stillLeft != nil && stillLeft! <= 2, "held for \(String(describing: stillLeft)) s")
        clock.advance(2.2)
        #expect(try await held("v-4") == nil, "still held after its 2 s")
        #expect(fake.signatureCount == 1)
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }

    @Test func aReloadAfterALoginAgainUsesTheNewRefreshTokenUnderTheSameClient() async throws {
        let fake = try await FakeGoogle.start()
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        // The file of an earlier login, whose refresh token has since been revoked.
        var stale = try #require(
            try JSONSerialization.jsonObject(with: fake.authorizedUserJSON(tokenURI: fake.tokenURI)) as? [String: Any]
        )
        stale["refresh_token"] = "1//revoked-long-ago"
        let path = try directory.write("adc.json", try JSONSerialization.data(withJSONObject: stale))
        var configuration = AgentConfiguration()
        configuration.issuers["vehicle"] = IssuerSettings(serviceAccount: Self.account)
        configuration.iamEndpoint = fake.iamEndpoint
        let discover: ProviderSet.CredentialsDiscovery = {
            try HostCredentials.discover(environment: ["GOOGLE_APPLICATION_CREDENTIALS": path], tuning: fastTuning)
        }
        let first = try ProviderSet.build(from: configuration, discoverCredentials: discover)
        let key = TokenKey(kind: "vehicle", id: "v-1")
        do {
            _ = try await first.providers["vehicle"]!.fetchToken(for: key)
            Issue.record("signed with a revoked refresh token")
        } catch let error as ProviderError {
            guard case .misconfigured(let text, _) = error else {
                Issue.record("\(error)")
                return
            }
            #expect(text.contains("gcloud auth application-default login"), "\(text)")
        }
        // The operator logs in again (same OAuth client, a new refresh token) and reloads.
        try directory.write("adc.json", fake.authorizedUserJSON(tokenURI: fake.tokenURI))
        let second = try ProviderSet.build(from: configuration, reusing: first, discoverCredentials: discover)
        do {
            let fetched = try await second.providers["vehicle"]!.fetchToken(for: key)
            #expect(fake.verify(fetched.token, account: Self.account) != nil)
        } catch {
            Issue.record("after the reload: \(error)")
        }
        #expect(second.changedKinds(since: first) == ["vehicle"])
        // Reloaded again with nothing changed: the source and the signer are kept.
        let third = try ProviderSet.build(from: configuration, reusing: second, discoverCredentials: discover)
        #expect(third.credentials.map { $0 as AnyObject } === second.credentials.map { $0 as AnyObject })
        #expect(third.changedKinds(since: second).isEmpty)
        for built in [first, second] {
            await built.providers["vehicle"]!.shutdown()
            await built.credentials?.shutdown()
        }
        await fake.stop()
    }

    @Test func aFaultThatComesBackAfterSigningAgainIsLoggedAgain() async throws {
        let fake = try await FakeGoogle.start()
        let source = try HostCredentials.source(for: .metadataServer(host: fake.metadataHost), tuning: fastTuning)
        let log = CapturedLog()
        let clock = SteppedWallClock()
        let signer = IAMSigner(
            account: Self.account,
            endpoint: try ServiceEndpoint(fake.iamEndpoint, key: "iam_endpoint"),
            credentials: source,
            faultHold: 0.5,
            clock: clock,
            logger: log.logger()
        )
        func fetch(_ id: String) async -> ProviderError? {
            do {
                _ = try await signer.fetchToken(for: TokenKey(kind: "vehicle", id: id))
                return nil
            } catch {
                return error as? ProviderError
            }
        }
        func logged() -> Int { log.lines.withLock { $0.count { $0.contains("key-less signing needs the operator") } } }
        fake.inject(.permissionDenied(.iamPermissionDenied), into: .iamCredentials, times: 2)
        #expect(await fetch("v-1") != nil)
        clock.advance(0.7)
        #expect(await fetch("v-2") != nil, "the same fault after its hold")
        #expect(logged() == 1, "a fault that lasts is logged once")
        clock.advance(0.7)
        #expect(await fetch("v-3") == nil, "fixed")
        // Revoked again later: a new fault, which the operator must hear of.
        fake.inject(.permissionDenied(.iamPermissionDenied), into: .iamCredentials)
        #expect(await fetch("v-4") != nil)
        #expect(logged() == 2, "\(log.text)")
        await signer.shutdown()
        await source.shutdown()
        await fake.stop()
    }
}
