import Foundation
import Testing
import TokenWire

@testable import TokenAgent

@Suite("Snapshot adoption: what a start takes from a snapshot")
struct SnapshotAdoptionTests {
    static let now = 1_800_000_000.0
    static let exp = now + 3000

    static func jwt(_ claim: String, _ id: String, exp: Double = SnapshotAdoptionTests.exp) -> String {
        makeJWT(["exp": exp, "authorization": [claim: id]])
    }

    static func token(_ kind: String, _ id: String, _ text: String, expiresAt: Double = exp) -> CachedToken {
        CachedToken(kind: kind, id: id, token: text, expiresAt: Int64(expiresAt))
    }

    @Test func onlyTokensOfUnchangedProvidersThatAFetchWouldPassAreTaken() {
        let rules = SnapshotAdoption(digests: ["vehicle": "d1", "trip": "d2"], acceptance: TokenAcceptance())
        let contents = CacheSnapshot.Contents(
            providers: ["vehicle": "d1", "trip": "old", "task": "d3"],
            tokens: [
                Self.token("vehicle", "v-1", Self.jwt("vehicleid", "v-1")),
                Self.token("trip", "t-1", Self.jwt("tripid", "t-1")),  // another provider made it
                Self.token("task", "k-1", Self.jwt("taskid", "k-1")),  // a kind no longer served
                Self.token("vehicle", "v-2", Self.jwt("vehicleid", "v-2"), expiresAt: Self.now + 9),
                Self.token("vehicle", "v-3", Self.jwt("vehicleid", "v-4")),  // names another id
                Self.token("vehicle", "*", Self.jwt("vehicleid", "*")),  // Fleet Engine's wildcard
                Self.token("vehicle", "v 5", Self.jwt("vehicleid", "v 5")),  // an id the wire refuses
                Self.token("vehicle", "v-6", Self.jwt("vehicleid", "v-6", exp: Self.now + 5)),  // exp sooner
                Self.token("vehicle", "v-7", makeRawJWT(payload: #"{"exp":1800003000}"#, header: #"{"alg":"none"}"#)),
                Self.token("vehicle", "v-8", makeJWT(["exp": Self.exp, "authorization": ["vehicleid": "*"]])),
                Self.token("vehicle", "v-9", "tok with spaces"),
                Self.token("vehicle", "v-10", "opaque-token-v-10"),  // not a JWT: as from a provider
                Self.token(
                    "vehicle",
                    "v-11",
                    Self.jwt("vehicleid", "v-11", exp: Self.now + 864_000),
                    expiresAt: Self.now + 864_000
                ),
            ],
            malformedLines: 2
        )
        let (tokens, counts) = rules.filter(contents, now: Self.now)
        #expect(tokens.map(\.id) == ["v-1", "v-10", "v-11"])
        #expect(tokens.first { $0.id == "v-11" }?.expiresAt == Int64(Self.now) + 86_400, "the longest lifetime")
        #expect(counts == SnapshotAdoption.Counts(adopted: 3, changedProvider: 2, expired: 2, refused: 8))
        #expect(counts.total == contents.tokens.count + contents.malformedLines)
    }

    /// An access token (a kind whose provider raises the serving floor to 300 s) with 200 s left
    /// counts as expired, where a JWT with as little left is taken; an opaque access token with
    /// more left passes the checks a fetched one passes.
    @Test func aKindWithARaisedFloorNeedsItsOwnFloorLeft() {
        let access = AccessTokenKind.kind(name: "fleet-admin")
        let rules = SnapshotAdoption(
            digests: ["vehicle": "d1", access: "d2"],
            acceptance: TokenAcceptance(),
            servingFloors: [access: AccessTokenKind.servingFloor]
        )
        let soon = Self.jwt("vehicleid", "v-1", exp: Self.now + 200)
        let contents = CacheSnapshot.Contents(
            providers: ["vehicle": "d1", access: "d2"],
            tokens: [
                Self.token("vehicle", "v-1", soon, expiresAt: Self.now + 200),
                Self.token(access, "fleet-admin", "ya29.short", expiresAt: Self.now + 200),
                Self.token(access, "fleet-admin", "ya29.long", expiresAt: Self.now + 301),
            ]
        )
        let (tokens, counts) = rules.filter(contents, now: Self.now)
        #expect(tokens.map(\.token) == [soon, "ya29.long"])
        #expect(counts == SnapshotAdoption.Counts(adopted: 2, expired: 1))
    }

    /// A snapshot large enough to be checked in slices, on every core, gives what one pass would.
    @Test func aLargeSnapshotIsCheckedInSlicesWithTheSameOutcome() {
        let rules = SnapshotAdoption(digests: ["vehicle": "d1", "trip": "d2"], acceptance: TokenAcceptance())
        let tokens = (0..<10_000).map { index -> CachedToken in
            let id = "v-\(index)"
            switch index % 4 {
            case 1: return Self.token("trip", "t-\(index)", Self.jwt("tripid", "t-\(index)"))  // another provider
            case 2: return Self.token("vehicle", id, Self.jwt("vehicleid", id), expiresAt: Self.now + 1)
            case 3: return Self.token("vehicle", id, Self.jwt("vehicleid", "other"))
            default: return Self.token("vehicle", id, Self.jwt("vehicleid", id))
            }
        }
        let contents = CacheSnapshot.Contents(providers: ["vehicle": "d1", "trip": "old"], tokens: tokens)
        let (taken, counts) = rules.filter(contents, now: Self.now)
        #expect(taken.map(\.id) == stride(from: 0, to: 10_000, by: 4).map { "v-\($0)" }, "in order")
        #expect(counts == SnapshotAdoption.Counts(adopted: 2500, changedProvider: 2500, expired: 2500, refused: 2500))
    }

    @Test func aKindsOwnClaimWildcardsAndLifetimeAreThoseOfItsProvider() throws {
        let acceptance = TokenAcceptance(
            claimNames: ["custom": "customid"],
            wildcardKinds: ["server"],
            maxLifetimes: ["custom": 600]
        )
        let rules = SnapshotAdoption(digests: ["custom": "c", "server": "s"], acceptance: acceptance)
        let server = makeJWT(["exp": Self.exp, "authorization": ["vehicleid": "*", "tripid": "*"]])
        let contents = CacheSnapshot.Contents(
            providers: ["custom": "c", "server": "s"],
            tokens: [
                Self.token("custom", "c-1", Self.jwt("customid", "c-1")),
                Self.token("custom", "c-2", Self.jwt("customid", "c-3")),
                Self.token("server", "*", server),
                Self.token("server", "s-1", server),  // a wildcard kind's only id is *
            ]
        )
        let (tokens, counts) = rules.filter(contents, now: Self.now)
        #expect(tokens.map(\.id) == ["c-1", "*"])
        #expect(tokens.first?.expiresAt == Int64(Self.now) + 600)
        #expect(counts == SnapshotAdoption.Counts(adopted: 2, refused: 2))
    }

    @Test func theProvidersAcceptanceCoversIssuerKindsWithTheirLifetime() async throws {
        let demo = try ProviderSet.build(from: parseConfiguration(#"{"demo": true, "issuer_lifetime": 900}"#))
        #expect(demo.acceptance.maxLifetime(of: "vehicle") == 900)
        #expect(demo.acceptance.claimNames["trip"] == "tripid")
        let http = try ProviderSet.build(
            from: parseConfiguration(
                #"{"providers": {"shuttle": {"url": "https://p.example/{id}", "claim": "ShuttleId", "max_lifetime": 1200}}}"#
            )
        )
        #expect(http.acceptance.claimNames["shuttle"] == "shuttleid")
        #expect(http.acceptance.maxLifetime(of: "shuttle") == 1200)
        for provider in http.providers.values { await provider.shutdown() }
    }

    /// An engine takes what adoption lets through, as if fetched now, and serves it; a chunked
    /// export gives it back.
    @Test func theEngineServesAdoptedTokensWithoutAFetchAndExportsThemInChunks() throws {
        let clock = ManualClock()
        let provider = ScriptedProvider(clock: clock)
        let engine = TokenEngine(providers: ["vehicle": provider], maxEntries: 1000, clock: clock)
        let wall = clock.wallSeconds
        let tokens = (0..<600).map {
            Self.token("vehicle", "v-\($0)", Self.jwt("vehicleid", "v-\($0)", exp: wall + 3000), expiresAt: wall + 3000)
        }
        let contents = CacheSnapshot.Contents(providers: ["vehicle": "d"], tokens: tokens)
        let (taken, counts) = SnapshotAdoption(digests: ["vehicle": "d"], acceptance: TokenAcceptance())
            .filter(contents, now: engine.unixNow.seconds)
        #expect(counts.adopted == 600)
        #expect(engine.importTokens(taken, from: .disk) == 600)
        guard case .ready(.success(let served)) = engine.lookup(kind: "vehicle", id: "v-7", minValidity: nil) else {
            Issue.record("v-7 is not answered from the cache")
            return
        }
        #expect(served.token == tokens[7].token)
        #expect(provider.fetches == 0)
        var chunks: [[CachedToken]] = []
        engine.exportTokens(to: .disk, chunkSize: 100) { chunks.append($0) }
        #expect(chunks.count == 6 && chunks.allSatisfy { $0.count == 100 })
        #expect(Set(chunks.joined()) == Set(tokens))
    }
}
