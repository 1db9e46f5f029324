import CSharedMemory
import Logging
import TestSupport
import Testing
import TokenSegment
import TokenWire

@testable import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// An access-token entry in the engine: a kind of its own whose provider raises the serving floor
/// to 300 s (the store's decisions, its refresh time, a segment's header) and keeps its tokens in
/// memory (never exported to, nor imported from, disk).
@Suite("Access tokens: the engine")
struct AccessTokenEngineTests {
    static let kind = AccessTokenKind.kind(name: "fleet-admin")

    /// A scripted provider as an access-token entry's is.
    final class EntryProvider: TokenProvider {
        let scripted: ScriptedProvider
        init(_ scripted: ScriptedProvider) { self.scripted = scripted }
        var summary: String { "entry" }
        var servingFloor: Double? { AccessTokenKind.servingFloor }
        var tokensStayInMemory: Bool { true }
        func fetchToken(for key: TokenKey) async throws -> FetchedToken { try await scripted.fetchToken(for: key) }
    }

    /// Entries read once stay active for a day: the tests step past hours.
    private func engine(_ clock: ManualClock, policy: RefreshPolicy = RefreshPolicy(idleTimeout: 86_400)) -> (
        TokenEngine, ScriptedProvider, ScriptedProvider
    ) {
        let access = ScriptedProvider(clock: clock, prefix: "ya29")
        let vehicle = ScriptedProvider(clock: clock)
        let engine = TokenEngine(
            providers: [Self.kind: EntryProvider(access), "vehicle": vehicle],
            policy: policy,
            clock: clock,
            random: { 0 }
        )
        return (engine, access, vehicle)
    }

    @Test func aTokenIsNeverServedWithUnder300SecondsLeftWhateverIsAsked() async throws {
        let clock = ManualClock()
        let (engine, access, vehicle) = engine(clock)
        let first = try await engine.get(kind: Self.kind, id: "fleet-admin").get()
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(engine.policy(for: Self.kind).servingFloor == 300)
        #expect(engine.policy(for: "vehicle").servingFloor == 10)
        clock.advance(3600 - 299)
        // The provider fails: the vehicle's token is still served, the access token is not.
        access.setMode(.fail(.failed("IAM generateAccessToken HTTP 503")))
        vehicle.setMode(.fail(.failed("HTTP 503")))
        #expect(try await engine.get(kind: "vehicle", id: "v-1", minValidity: 0).get().token == "tok-v-1-1")
        let refused = await engine.get(kind: Self.kind, id: "fleet-admin", minValidity: 0)
        #expect(refused == .failure(.fetchFailed("IAM generateAccessToken HTTP 503")))
        #expect(access.fetches == 2)
        access.setMode(.succeed(lifetime: 3600))
        clock.advance(10)  // past the back-off
        let second = try await engine.get(kind: Self.kind, id: "fleet-admin", minValidity: 0).get()
        #expect(second.token != first.token)
    }

    @Test func aTokenFetchedWithUnder300SecondsLeftIsAFailure() async throws {
        let clock = ManualClock()
        let (engine, access, _) = engine(clock)
        access.setMode(.succeed(lifetime: 299))
        #expect(
            await engine.get(kind: Self.kind, id: "fleet-admin")
                == .failure(.fetchFailed("token expires in under 300 s"))
        )
    }

    @Test func itIsRefreshedAtTheMarginAndAlwaysAheadOfTheFloor() async throws {
        let clock = ManualClock()
        let (engine, access, _) = engine(clock)
        _ = try await engine.get(kind: Self.kind, id: "fleet-admin").get()
        clock.advance(2999)
        #expect(engine.maintain() == 0)
        clock.advance(1.5)
        #expect(engine.maintain() == 1, "600 s before expiry: the refresh margin")
        #expect(await eventually { access.fetches == 2 })

        // A margin under the floor still refreshes a minute before it.
        var policy = RefreshPolicy(idleTimeout: 86_400)
        policy.refreshMargin = 30
        let (small, smallAccess, _) = self.engine(clock, policy: policy)
        _ = try await small.get(kind: Self.kind, id: "fleet-admin").get()
        clock.advance(3600 - 361)
        #expect(small.maintain() == 0)
        clock.advance(2)
        #expect(small.maintain() == 1, "360 s before expiry")
        #expect(await eventually { smallAccess.fetches == 2 })
        // A token shorter than two floors is refreshed before it stops being served.
        #expect(
            policy.raisingServingFloor(to: 300).refreshTime(
                fetchedAt: .init(seconds: 0),
                expiry: .init(seconds: 400),
                jitterUnit: 0
            )
            .seconds == 100
        )
    }

    @Test func itsTokensGoToTheFileDescriptorStoreButNeverToDisk() async throws {
        let clock = ManualClock()
        let (engine, _, _) = engine(clock)
        let access = try await engine.get(kind: Self.kind, id: "fleet-admin").get()
        _ = try await engine.get(kind: "vehicle", id: "v-1").get()
        #expect(engine.tokensStayInMemory(kind: Self.kind))
        #expect(!engine.tokensStayInMemory(kind: "vehicle"))
        #expect(Set(engine.exportTokens(to: .memory).map(\.kind)) == [Self.kind, "vehicle"])
        #expect(engine.exportTokens(to: .disk).map(\.kind) == ["vehicle"])

        let planted = [
            CachedToken(
                kind: Self.kind,
                id: "fleet-admin",
                token: "ya29.planted",
                expiresAt: Int64(clock.wallSeconds) + 3000
            ),
            CachedToken(kind: "vehicle", id: "v-2", token: "tok-planted", expiresAt: Int64(clock.wallSeconds) + 3000),
        ]
        let (next, nextAccess, _) = self.engine(clock)
        #expect(next.importTokens(planted, from: .disk) == 1, "the vehicle token only")
        _ = try await next.get(kind: Self.kind, id: "fleet-admin").get()
        #expect(nextAccess.fetches == 1, "an access token read from disk is never served")
        let (handed, handedAccess, _) = self.engine(clock)
        #expect(handed.importTokens([planted[0]], from: .memory) == 1)
        #expect(try await handed.get(kind: Self.kind, id: "fleet-admin").get().token == "ya29.planted")
        #expect(handedAccess.fetches == 0)
        #expect(access.token.hasPrefix("ya29"))
    }

    @Test func anEntrysSegmentTellsReadersItsFloor() throws {
        let segments = SharedSegments(
            kinds: [Self.kind, "vehicle"],
            policy: RefreshPolicy(),
            servingFloors: [Self.kind: AccessTokenKind.servingFloor],
            logger: Logger(label: "test")
        )
        defer { segments.retireAll() }
        let now = fsm_boottime_ns()
        for kind in [Self.kind, "vehicle"] {
            guard case .offered(let offer) = segments.offer(kind: kind, unlessAlreadySent: { _ in false }) else {
                Issue.record("\(kind): no segment")
                continue
            }
            defer { close(offer.descriptor) }
            let reader = try SegmentReader(descriptor: offer.descriptor, expectedSize: offer.size, kind: kind)
            // 200 s left of an hour-long token, asked with no minimum: under the entry's floor only.
            let servable = reader.isServable(
                expiry: now + 200_000_000_000,
                lifetime: 3_600_000_000_000,
                minimumValidity: 0,
                now: now
            )
            #expect(servable == (kind == "vehicle"), "\(kind)")
        }
    }
}
