import MetadataEndpoint
import Synchronization
import Testing

/// A token is sent only if the rules in force when it comes still allow the peer: a reload while
/// it is fetched (issue 46, item 2) takes it from a user it no longer names, as the socket does.
@Suite struct RulesInForceTests {
    static let tokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    /// The entries "in force", swapped by the test while a token is fetched.
    final class InForce: Sendable {
        let entries = Mutex<[MetadataEntry]>(Fixture.entries)
    }

    /// A token source whose fetch runs `during` before it answers: the reload in the middle.
    struct FetchWithReload: MetadataTokenSource {
        let entries: [MetadataEntry]
        let during: @Sendable () -> Void

        func token(for entry: MetadataEntry) async throws -> MetadataToken {
            during()
            return MetadataToken(accessToken: "ya29.token-of-\(entry.name)", expiresAt: Fixture.now + 3600)
        }
    }

    static func router(_ inForce: InForce, during: @escaping @Sendable () -> Void) -> MetadataRouter {
        MetadataRouter(
            configuration: MetadataServerConfiguration(listen: Fixture.listen, defaultEntry: "fleet-admin"),
            tokens: FetchWithReload(entries: Fixture.entries, during: during),
            now: { Fixture.now },
            entriesInForce: { inForce.entries.withLock { $0 } }
        )
    }

    @Test func aUserTheReloadRemovedGetsNoToken() async {
        let inForce = InForce()
        let router = Self.router(inForce) {
            inForce.entries.withLock { entries in
                for index in entries.indices where entries[index].name == "fleet-admin" {
                    entries[index].allowedUIDs = [0]
                    entries[index].allowedGIDs = []
                }
            }
        }
        let response = await ask(router, Self.tokenPath)
        #expect(response.status == 403)
        #expect(response.outcome == .refusedRules)
        #expect(response.text.contains("uid 1000 is no longer allowed the token of fleet-admin"), "\(response.text)")
        #expect(!response.text.contains("ya29."))
    }

    @Test func anEntryTheReloadRemovedIsNotSent() async {
        let inForce = InForce()
        let router = Self.router(inForce) { inForce.entries.withLock { $0.removeAll { $0.name == "fleet-admin" } } }
        let response = await ask(router, Self.tokenPath)
        #expect(response.status == 403 && !response.text.contains("ya29."))
    }

    @Test func aReloadThatKeepsTheUserKeepsTheToken() async {
        let inForce = InForce()
        let router = Self.router(inForce) {
            inForce.entries.withLock { entries in
                for index in entries.indices where entries[index].name == "fleet-admin" {
                    entries[index].allowedUIDs.insert(0)
                }
            }
        }
        let response = await ask(router, Self.tokenPath)
        #expect(response.status == 200 && response.text.contains("ya29.token-of-fleet-admin"))
    }
}
