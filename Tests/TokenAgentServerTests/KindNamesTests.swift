import Testing
import TokenAgent

@testable import TokenAgentServer

@Suite("Kind names")
struct KindNamesTests {
    private func name(_ names: KindNames, _ text: String) -> String? {
        Array(text.utf8).withUnsafeBytes { names.name(of: $0) }
    }

    @Test func aKindIsFoundByItsWholeNameOnly() {
        let names = KindNames(kinds: ["delivery-vehicle", "trip", "vehicle"], version: 3)
        #expect(names.version == 3)
        #expect(name(names, "vehicle") == "vehicle")
        #expect(name(names, "trip") == "trip")
        #expect(name(names, "delivery-vehicle") == "delivery-vehicle")
        for other in ["vehicl", "vehicles", "Vehicle", "tripx", "delivery-vehiclf", "", "lorry"] {
            #expect(name(names, other) == nil, "\(other)")
        }
        #expect(name(KindNames(kinds: [], version: 0), "vehicle") == nil)
    }

    /// Every connection of a context reads one table; a reload that changes the kinds makes a new
    /// one, which names the new kinds only.
    @Test func aContextsConnectionsShareOneTableUntilAReload() {
        let engine = TokenEngine(providers: ["vehicle": InstantProvider(), "trip": InstantProvider()])
        let shared = KindNames.Shared()
        let first = shared.names(of: engine)
        #expect(shared.names(of: engine) === first)
        #expect(name(first, "trip") == "trip")
        engine.reconfigure(providers: ["vehicle": InstantProvider()], policy: engine.policy, changedKinds: [])
        let second = shared.names(of: engine)
        #expect(second !== first)
        #expect(second.version == engine.kindsVersion)
        #expect(name(second, "trip") == nil)
        #expect(name(second, "vehicle") == "vehicle")
        #expect(shared.names(of: engine) === second)
    }
}
