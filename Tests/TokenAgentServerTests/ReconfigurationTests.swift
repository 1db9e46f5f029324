import Testing
import TokenAgent

@testable import TokenAgentServer

/// A reload's steps, looked at between each: a kind is never served while the rules in force lack
/// its own (a new kind is closed until its rules are in force, a removed kind refused at once).
@Suite("Reconfiguration order")
struct ReconfigurationTests {
    private struct Provider: TokenProvider {
        var summary: String { "test" }
        func fetchToken(for key: TokenKey) async throws -> FetchedToken {
            FetchedToken(token: "tok-\(key.id)", expiresAtUnixSeconds: SystemAgentClock().wallSeconds + 3600)
        }
    }

    private let stranger = PeerCredentials(pid: 1, uid: 1000, gid: 1000)
    private let owner = PeerCredentials(pid: 2, uid: 1005, gid: 1005)

    private func rules(_ kinds: Set<String>) -> AccessRules {
        var allow: [String: AccessRules.Principals] = [:]
        if kinds.contains("newk") { allow["newk"] = AccessRules.Principals(uids: [1005]) }
        return AccessRules(allow: allow, admin: nil, agentUID: 4_000_000, kinds: kinds)
    }

    /// Whether `peer` could be served `kind` right now: the engine serves it and the rules allow it.
    private func served(_ peer: PeerCredentials, _ kind: String, _ engine: TokenEngine, _ access: AccessControl) -> Bool
    {
        engine.kinds.contains(kind) && access.check(peer, kind: kind) == nil
    }

    @Test func aKindComingAndGoingIsNeverOpenToAStranger() {
        let old: Set<String> = ["vehicle"]
        let new: Set<String> = ["vehicle", "newk"]
        let engine = TokenEngine(providers: ["vehicle": Provider()])
        let access = AccessControl(rules: rules(old))
        var looked: [Reconfiguration.Step] = []
        for (from, to) in [(old, new), (new, old), (old, new)] {
            Reconfiguration.apply(
                rules: rules(to),
                providers: Dictionary(uniqueKeysWithValues: to.map { ($0, Provider() as any TokenProvider) }),
                policy: RefreshPolicy(),
                changedKinds: from.symmetricDifference(to),
                rulesChanged: ["newk"],
                engine: engine,
                access: access,
                segments: nil
            ) { step in
                looked.append(step)
                #expect(!served(stranger, "newk", engine, access), "newk open to a stranger after \(step)")
                #expect(served(stranger, "vehicle", engine, access), "vehicle stays open after \(step)")
            }
            #expect(served(owner, "newk", engine, access) == to.contains("newk"))
        }
        #expect(looked.count == 3 * Reconfiguration.Step.allCases.count)
    }

    @Test func aKindWhoseProviderAndRulesChangeIsClosedUntilTheOldTokensAreGone() async {
        let engine = TokenEngine(providers: ["newk": Provider()])
        let access = AccessControl(rules: rules(["newk"]))
        _ = await engine.get(kind: "newk", id: "n-1")
        let widened = AccessRules(allow: [:], admin: nil, agentUID: 4_000_000, kinds: ["newk"])
        Reconfiguration.apply(
            rules: widened,
            providers: ["newk": Provider()],
            policy: RefreshPolicy(),
            changedKinds: ["newk"],
            rulesChanged: ["newk"],
            engine: engine,
            access: access,
            segments: nil
        ) { step in
            switch step {
            case .segmentsWithheld, .rulesInForce, .engineReconfigured:
                #expect(access.check(stranger, kind: "newk") != nil, "closed to the newly allowed after \(step)")
            case .changedKindsOpened, .segmentsOffered:
                #expect(access.check(stranger, kind: "newk") == nil, "open once the old tokens are gone")
                #expect(engine.info(kind: "newk", id: "n-1") == .success(nil), "the old provider's token is gone")
            }
        }
    }
}
