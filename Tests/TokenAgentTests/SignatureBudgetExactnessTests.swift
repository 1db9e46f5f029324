import Foundation
import Synchronization
import TestSupport
import Testing
import _CryptoExtras

@testable import TokenAgent

/// A scripted provider with a signature budget that spends its permit when its fetch ends, as a
/// key-less issuer spends it only once its access token is there and the signJwt request leaves.
private final class LateSpendingProvider: TokenProvider, Sendable {
    let scripted: ScriptedProvider
    let budget: SignatureBudget

    init(clock: ManualClock, perMinute: Int) {
        scripted = ScriptedProvider(clock: clock)
        budget = SignatureBudget(perMinute: perMinute, clock: clock, wakesItself: false)
    }

    var summary: String { "late-spending" }
    var signatureBudget: SignatureBudget? { budget }

    func fetchToken(for key: TokenKey) async throws -> FetchedToken {
        let token = try await scripted.fetchToken(for: key)
        SignaturePermit.current?.spend()
        return token
    }
}

/// The signature budget counts a signature from when its request leaves, keeps a kind's window
/// across reloads, and serves owners in turn.
@Suite("Signature budget: exact at the API")
struct SignatureBudgetExactnessTests {
    /// A permit granted at t = 0 whose request leaves at t = 30 (the access token was slow) is in
    /// the cap's window until t = 91: at t = 62 a budget of one a minute grants nothing (it did,
    /// when the permit counted from the fetch's place in its lane), at t = 92 it grants.
    @Test func aSignatureCountsFromWhenItsRequestLeaves() async throws {
        let clock = ManualClock()
        let provider = LateSpendingProvider(clock: clock, perMinute: 1)
        let engine = TokenEngine(providers: ["vehicle": provider], clock: clock, random: { 0 })
        provider.scripted.hold()
        let first = Task { await engine.get(kind: "vehicle", id: "v-1") }
        #expect(await eventually { provider.scripted.heldCount == 1 })
        clock.advance(30)
        provider.scripted.release()
        #expect((try? await first.value.get()) != nil)

        clock.advance(32)
        let second = Task { await engine.get(kind: "vehicle", id: "v-2") }
        #expect(await eventually { provider.budget.counters.queued == 1 })
        provider.budget.serveDue()
        #expect(provider.budget.counters.signatures == 1, "the window still holds the send at t = 30")
        clock.advance(30)
        provider.budget.serveDue()
        #expect((try? await second.value.get()) != nil)
        #expect(provider.budget.counters.signatures == 2)
    }

    /// A reload that rebuilds a kind's issuer (its lifetime changed) keeps its budget, or, with a
    /// new rate, carries the sends of the last minute into the new one: no fresh minute.
    @Test func aReloadKeepsTheKindsWindow() async throws {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let account: [String: String] = [
            "type": "service_account", "private_key": key.pkcs8PEMRepresentation, "private_key_id": "kid-1",
            "client_email": "fleet@project.iam.gserviceaccount.com",
        ]
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("key-\(UUID().uuidString).json").path
        #expect(
            FileManager.default.createFile(
                atPath: path,
                contents: try JSONSerialization.data(withJSONObject: account),
                attributes: [.posixPermissions: 0o600]
            )
        )
        defer { try? FileManager.default.removeItem(atPath: path) }
        func configuration(lifetime: Double, perMinute: Double) -> AgentConfiguration {
            var settings = IssuerSettings(keyFile: path)
            settings.lifetime = lifetime
            settings.signsPerMinute = perMinute
            var configuration = AgentConfiguration()
            configuration.issuers["vehicle"] = settings
            return configuration
        }
        let clock = ManualClock()
        /// Whether `budget` grants a permit at once (and then counts it sent).
        func grantsNow(_ budget: SignatureBudget) async -> Bool {
            let ticket = FetchTicket(priority: .get)
            do {
                try await budget.permit(for: ticket, deadline: clock.now)
            } catch {
                return false
            }
            budget.sent(ticket)
            return true
        }
        let first = try ProviderSet.build(from: configuration(lifetime: 1800, perMinute: 60), clock: clock)
        let budget = try #require(first.providers["vehicle"]?.signatureBudget)
        for _ in 0..<10 { #expect(await grantsNow(budget)) }
        #expect(await grantsNow(budget) == false, "the burst (10) is spent")

        let second = try ProviderSet.build(
            from: configuration(lifetime: 900, perMinute: 60),
            reusing: first,
            clock: clock
        )
        #expect(second.changedKinds(since: first) == ["vehicle"])
        let kept = try #require(second.providers["vehicle"]?.signatureBudget)
        #expect(kept === budget, "the same rate: the same budget")
        #expect(await grantsNow(kept) == false)

        let third = try ProviderSet.build(
            from: configuration(lifetime: 900, perMinute: 12),
            reusing: second,
            clock: clock
        )
        let carried = try #require(third.providers["vehicle"]?.signatureBudget)
        #expect(carried !== budget && carried.perMinute == 12)
        #expect(await grantsNow(carried) == false, "the 10 sends of this minute are in its window, its bucket empty")
        clock.advance(62)
        #expect(await grantsNow(carried), "and leave it after 61 s")
    }
}
