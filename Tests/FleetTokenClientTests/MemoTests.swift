import Foundation
import Testing

@testable import FleetTokenClient

/// ``MemoTable``: tokens remembered in-process, asked at instants the test chooses (the memo's
/// `at:` arguments) instead of waiting for them. A token's validity is measured from when it is
/// remembered, so every instant below is that of `remember` plus some seconds; the margins of a
/// second around each limit are far wider than the microseconds between making a token and
/// remembering it.
@Suite("Client: memo")
struct MemoTests {
    private let start = ContinuousClock.now
    private let vehicle = TokenSubject.vehicle("v-1")

    private func token(_ jwt: String, expiresIn seconds: Double) -> Token {
        Token(jwt: jwt, expiresAt: Date(timeIntervalSinceNow: seconds))
    }

    /// A JWT (unsigned: the memo reads only its payload) issued `issuedAgo` seconds ago that
    /// expires in `seconds`, as the agent reports it.
    private func jwt(issuedAgo: Double, expiresIn seconds: Double) -> Token {
        let now = Date().timeIntervalSince1970
        let payload = #"{"iat":\#(Int(now - issuedAgo)),"exp":\#(Int(now + seconds)),"sub":"v-1"}"#
        let encoded = Data(payload.utf8).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return Token(jwt: "eyJhbGciOiJSUzI1NiJ9.\(encoded).c2ln", expiresAt: Date(timeIntervalSince1970: now + seconds))
    }

    private func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int64(seconds * 1000)) }

    @Test func aTokenIsReusedUntilTheDefaultMinimumValidityIsLeft() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let hourToken = token("hour", expiresIn: 3600)
        memo.remember(hourToken, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == hourToken)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(3299)) == hourToken, "301 s left")
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(3301)) == nil, "299 s left")
        #expect(memo.token(for: .vehicle("v-2"), minimumValidity: nil, at: start) == nil, "another subject")
    }

    @Test func aNamedMinimumValidityIsHonouredAsAsked() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let hourToken = token("hour", expiresIn: 3600)
        memo.remember(hourToken, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: 3599, at: start) == hourToken)
        #expect(memo.token(for: vehicle, minimumValidity: 3601, at: start) == nil)
        #expect(memo.token(for: vehicle, minimumValidity: 2599, at: at(1000)) == hourToken)
        #expect(memo.token(for: vehicle, minimumValidity: 2601, at: at(1000)) == nil)
        // Below the 10 s floor of the default rule, when asked for.
        #expect(memo.token(for: vehicle, minimumValidity: 0, at: at(3595)) == hourToken)
    }

    /// As in the agent, a short-lived token needs a quarter of its lifetime (`exp - iat`), at least 10 s.
    @Test(arguments: [(120.0, 30.0), (20.0, 10.0), (1000.0, 250.0), (4000.0, 300.0)])
    func aShortLivedTokenNeedsAQuarterOfItsLifetime(lifetime: Double, needed: Double) {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let short = jwt(issuedAgo: 0, expiresIn: lifetime)
        memo.remember(short, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(lifetime - needed - 1.5)) == short)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(lifetime - needed + 1.5)) == nil)
    }

    /// A short-lived JWT received late in its life needs a quarter of the lifetime it was issued
    /// for, not of what was left when it arrived: 30 s of a 120 s token received with 40 s left.
    @Test func aShortLivedTokenReceivedLateNeedsAQuarterOfItsWholeLifetime() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let late = jwt(issuedAgo: 80, expiresIn: 40)
        memo.remember(late, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(8.5)) == late, "31.5 s left")
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(11.5)) == nil, "28.5 s left: under 30 s")
    }

    /// The agent's lifetime of an opaque token is unknown here: the memo asks it the whole default
    /// minimum validity, however short the token, and leaves the rest to the agent.
    @Test(arguments: [20.0, 120.0, 1000.0, 3600.0])
    func anOpaqueTokenNeedsTheWholeDefaultMinimumValidity(expiresIn: Double) {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let opaque = token("opaque-\(expiresIn)", expiresIn: expiresIn)
        memo.remember(opaque, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == (expiresIn > 300 ? opaque : nil))
        if expiresIn > 301.5 {
            #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(expiresIn - 301.5)) == opaque)
        }
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: at(max(0, expiresIn - 298.5))) == nil)
        // A named minimum validity is the caller's, as with any token.
        #expect(memo.token(for: vehicle, minimumValidity: 5, at: at(expiresIn - 6.5)) == opaque)
    }

    /// A JWT whose `iat` is later than its receipt (a clock ahead of the host's) says nothing
    /// about when the agent fetched it: it counts as opaque.
    @Test func aTokenIssuedInTheFutureCountsAsOpaque() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let skewed = jwt(issuedAgo: -60, expiresIn: 120)
        memo.remember(skewed, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == nil, "120 s left, under 300 s")
    }

    @Test(arguments: ["", "a.b", "a.b.c.d", "x.!!!.y", "x.bm90IGpzb24.y", "x.eyJpYXQiOiIxIn0.y"])
    func whatIsNoJWTWithANumericIatHasNoIssueTime(jwt: String) {
        #expect(MemoTable.issuedAt(ofJWT: jwt) == nil)
    }

    /// `payload` in base64 as the agent writes a JWT's parts (URL-safe, unpadded), or in another
    /// spelling of the same bytes: the standard alphabet (`+`, `/`), padded.
    static func encode(_ payload: String, urlSafe: Bool = true, padded: Bool = false) -> String {
        var text = Data(payload.utf8).base64EncodedString()
        if urlSafe { text = text.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_") }
        if !padded { text = text.replacingOccurrences(of: "=", with: "") }
        return text
    }

    /// Payloads whose URL-safe spellings hold `-` (and padding when padded) and `_`.
    static let dashed = #"{"iat":1700000000,"sub":"v-1~~"}"#
    static let underscored = #"{"iat":1700000000,"exp":1700003600,"sub":"v-1","x":"??>"}"#

    /// The agent's spelling of a payload, whatever its bytes, is read.
    @Test func aPayloadInStrictUnpaddedBase64URLIsRead() {
        #expect(Self.encode(Self.dashed).contains("-"))
        #expect(Self.encode(Self.underscored).contains("_"))
        for payload in [Self.dashed, Self.underscored] {
            #expect(MemoTable.issuedAt(ofJWT: "x.\(Self.encode(payload)).y") == 1_700_000_000, "\(payload)")
        }
    }

    /// (what, the payload's part) for ``aPayloadInAnyOtherBase64SpellingIsNotRead(what:part:)``.
    static let otherSpellings: [(String, String)] = {
        let dashed = encode(Self.dashed)
        let underscored = encode(Self.underscored)
        return [
            ("padded", encode(Self.dashed, padded: true)),
            ("+ for -", encode(Self.dashed, urlSafe: false)),
            ("/ for _", encode(Self.underscored, urlSafe: false)),
            ("a length of 1 mod 4", underscored + "A"),
            ("a space inside", String(underscored.prefix(8)) + " " + String(underscored.dropFirst(8))),
            ("a line break at the end", underscored + "\n"),
            ("non-zero unused bits", String(dashed.dropLast()) + "1"),
        ]
    }()

    /// A payload spelt otherwise than the agent accepts a JWT's payload (``StrictBase64URL``) is
    /// not read (the memo's lenient decoding once read the padded, `+` and `/` spellings): the
    /// token counts as opaque.
    @Test(arguments: otherSpellings)
    func aPayloadInAnyOtherBase64SpellingIsNotRead(what: String, part: String) {
        if what == "a length of 1 mod 4" { #expect(part.utf8.count % 4 == 1) }
        #expect(MemoTable.issuedAt(ofJWT: "x.\(part).y") == nil, "\(what): \(part)")
    }

    /// A claim given twice is read differently by different readers (the memo once took the last
    /// `iat`): the payload is not read, whichever claim it is.
    @Test(arguments: [
        #"{"iat":1700000000,"iat":1700003000,"exp":1700003600}"#,
        #"{"iat":1700000000,"exp":1700003600,"exp":1700007200}"#,
        #"{"iat":1700000000,"sub":"v-1","sub":"v-2"}"#,
    ])
    func aPayloadThatGivesAClaimTwiceIsNotRead(payload: String) {
        #expect(MemoTable.issuedAt(ofJWT: "x.\(Self.encode(payload)).y") == nil)
    }

    /// A JWT whose payload the memo cannot read is still remembered, as an opaque token: it
    /// needs the whole default minimum validity, however short its lifetime.
    @Test func aTokenThatGivesIatTwiceCountsAsOpaque() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let now = Date().timeIntervalSince1970
        let payload = #"{"iat":\#(Int(now)),"iat":\#(Int(now)),"exp":\#(Int(now + 120))}"#
        let twice = Token(jwt: "x.\(Self.encode(payload)).y", expiresAt: Date(timeIntervalSince1970: now + 120))
        memo.remember(twice, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == nil, "120 s left, under 300 s")
        #expect(memo.token(for: vehicle, minimumValidity: 60, at: start) == twice, "remembered")
        let once = jwt(issuedAgo: 0, expiresIn: 120)
        memo.remember(once, for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == once, "the control: 30 s needed")
    }

    @Test func theIssueTimeIsReadFromAJWTsPayload() throws {
        let token = jwt(issuedAgo: 100, expiresIn: 3500)
        let issuedAt = try #require(MemoTable.issuedAt(ofJWT: token.jwt))
        #expect(abs(issuedAt - (Date().timeIntervalSince1970 - 100)) < 2)
        #expect(abs(MemoTable.lifetime(of: token, receivedAt: Date()) - 3600) < 2)
    }

    @Test func anExpiredTokenIsNeverServed() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        memo.remember(token("expired", expiresIn: -5), for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: 0, at: start) == nil)
        memo.remember(token("minute", expiresIn: 60), for: .vehicle("v-2"), at: start)
        #expect(memo.token(for: .vehicle("v-2"), minimumValidity: 0, at: at(59))?.jwt == "minute")
        #expect(memo.token(for: .vehicle("v-2"), minimumValidity: 0, at: at(61)) == nil)
    }

    @Test func rememberingReplacesAndForgettingANamedTokenNeedsThatToken() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        memo.remember(token("first", expiresIn: 3600), for: vehicle, at: start)
        memo.remember(token("second", expiresIn: 3600), for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start)?.jwt == "second")
        memo.forget(vehicle, ifHolding: "first")
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start)?.jwt == "second", "not the token held")
        memo.forget(vehicle, ifHolding: "second")
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == nil)
        memo.remember(token("third", expiresIn: 3600), for: vehicle, at: start)
        memo.remember(token("trip", expiresIn: 3600), for: .trip("v-1"), at: start)
        memo.forget(vehicle)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == nil)
        #expect(memo.token(for: .trip("v-1"), minimumValidity: nil, at: start)?.jwt == "trip", "another kind")
        memo.removeAll()
        #expect(memo.token(for: .trip("v-1"), minimumValidity: nil, at: start) == nil)
    }

    /// Ids that are canonically equivalent but of different bytes are different subjects to the
    /// agent: one's token never answers the other.
    @Test func subjectsAreTheirBytes() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        let precomposed = TokenSubject.vehicle("v-\u{E9}")
        let decomposed = TokenSubject.vehicle("v-e\u{301}")
        memo.remember(token("precomposed", expiresIn: 3600), for: precomposed, at: start)
        #expect(memo.token(for: decomposed, minimumValidity: nil, at: start) == nil)
        #expect(memo.token(for: precomposed, minimumValidity: nil, at: start)?.jwt == "precomposed")
    }

    @Test(arguments: [1, 3, 16])
    func theMemoNeverHoldsMoreThanItsCapacity(capacity: Int) {
        let memo = MemoTable(capacity: capacity, defaultMinimumValidity: 300)
        let subjects = (0..<(capacity * 3)).map { TokenSubject.vehicle("v-\($0)") }
        for subject in subjects { memo.remember(token(subject.id, expiresIn: 3600), for: subject, at: start) }
        let held = subjects.filter { memo.token(for: $0, minimumValidity: nil, at: start) != nil }
        #expect(held.count == capacity)
        #expect(held.contains(subjects.last!), "the newest token is kept")
    }

    @Test func aMemoOfNoCapacityHoldsNothing() {
        let memo = MemoTable(capacity: 0, defaultMinimumValidity: 300)
        memo.remember(token("t", expiresIn: 3600), for: vehicle, at: start)
        #expect(memo.token(for: vehicle, minimumValidity: nil, at: start) == nil)
    }

    @Test func expiredTokensMakeRoomBeforeAnyValidOneIsEvicted() {
        let memo = MemoTable(capacity: 8, defaultMinimumValidity: 300)
        let shortLived = (0..<4).map { TokenSubject.vehicle("short-\($0)") }
        let valid = (0..<4).map { TokenSubject.vehicle("valid-\($0)") }
        for subject in shortLived { memo.remember(token(subject.id, expiresIn: 20), for: subject, at: start) }
        for subject in valid { memo.remember(token(subject.id, expiresIn: 3600), for: subject, at: start) }
        // 30 s on, the short-lived ones have expired: four new tokens take their room.
        let later = (0..<4).map { TokenSubject.vehicle("later-\($0)") }
        for subject in later { memo.remember(token(subject.id, expiresIn: 3600), for: subject, at: at(30)) }
        for subject in valid + later {
            #expect(memo.token(for: subject, minimumValidity: nil, at: at(30)) != nil, "\(subject) kept")
        }
    }

    @Test func replacingASubjectAtCapacityEvictsNothing() {
        let memo = MemoTable(capacity: 2, defaultMinimumValidity: 300)
        memo.remember(token("a-1", expiresIn: 3600), for: .vehicle("a"), at: start)
        memo.remember(token("b-1", expiresIn: 3600), for: .vehicle("b"), at: start)
        memo.remember(token("a-2", expiresIn: 3600), for: .vehicle("a"), at: start)
        #expect(memo.token(for: .vehicle("a"), minimumValidity: nil, at: start)?.jwt == "a-2")
        #expect(memo.token(for: .vehicle("b"), minimumValidity: nil, at: start)?.jwt == "b-1")
    }

    /// docs/DESIGN.md: the memo returns a token while it has more left than the agent's own rule
    /// asks (`max(10, min(min-validity, lifetime / 4))`), where `lifetime` is the validity the
    /// token had when the agent fetched it, not what was left when the reply arrived: a one-hour
    /// token received with 600 s left needs 300 s, not 150 s.
    @Test func aTokenReceivedLateInItsLifeIsServedNoLongerThanTheAgentWould() {
        let memo = MemoTable(capacity: 10, defaultMinimumValidity: 300)
        // Fetched by the agent 50 minutes ago (an hour's lifetime), received now with 600 s left;
        // as a JWT (its `iat` read) and as an opaque token.
        let late = jwt(issuedAgo: 3000, expiresIn: 600)
        let opaque = token("late", expiresIn: 600)
        memo.remember(late, for: vehicle, at: start)
        memo.remember(opaque, for: .trip("t-1"), at: start)
        for (subject, token) in [(vehicle, late), (TokenSubject.trip("t-1"), opaque)] {
            #expect(memo.token(for: subject, minimumValidity: nil, at: at(298.5)) == token, "301.5 s left")
            // 400 s on, 200 s are left: the agent would not serve it on a default GET (300 s).
            #expect(memo.token(for: subject, minimumValidity: nil, at: at(400)) == nil)
        }
    }
}
