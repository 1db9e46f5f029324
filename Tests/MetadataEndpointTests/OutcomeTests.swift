import MetadataEndpoint
import Testing

/// Each answer's outcome, what the agent counts it under: a token, another 200, which check
/// refused it, or which error it is.
@Suite struct OutcomeTests {
    static let base = "/computeMetadata/v1/instance/service-accounts/"

    /// A request and the outcome of its answer.
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var target: String
        var method = "GET"
        var headers: [(String, String?)] = []
        var peer = Fixture.admin
        var outcome: MetadataOutcome
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "a token", target: base + "default/token", outcome: .token),
        Case(name: "a token, HEAD", target: base + "default/token", method: "HEAD", outcome: .token),
        Case(name: "a token by email", target: base + Fixture.adminAccount + "/token", outcome: .token),
        Case(name: "the root", target: "/", outcome: .ok),
        Case(name: "an email", target: base + "default/email", outcome: .ok),
        Case(name: "the accounts", target: base + "?recursive=true", outcome: .ok),
        Case(name: "the project", target: "/computeMetadata/v1/project/project-id", outcome: .ok),
        Case(name: "a target that is no path", target: "*", outcome: .badRequest),
        Case(name: "wait_for_change", target: "/?wait_for_change=true", outcome: .badRequest),
        Case(name: "a foreign Host", target: "/", headers: [("Host", "evil.example")], outcome: .refusedHost),
        Case(name: "no Host", target: "/", headers: [("Host", nil)], outcome: .refusedHost),
        Case(name: "a foreign authority", target: "http://evil.example/", outcome: .refusedHost),
        Case(
            name: "X-Forwarded-For",
            target: base + "default/token",
            headers: [("X-Forwarded-For", "10.0.0.1")],
            outcome: .refusedForwarded
        ),
        Case(name: "Forwarded", target: "/", headers: [("Forwarded", "for=10.0.0.1")], outcome: .refusedForwarded),
        Case(
            name: "no Metadata-Flavor",
            target: base + "default/token",
            headers: [("Metadata-Flavor", nil)],
            outcome: .refusedFlavor
        ),
        Case(
            name: "an unidentified peer",
            target: base + "default/token",
            peer: .unidentified(reason: "no socket"),
            outcome: .refusedPeer
        ),
        Case(
            name: "an unidentified peer, the accounts",
            target: base,
            peer: .unidentified(reason: "no socket"),
            outcome: .refusedPeer
        ),
        Case(name: "a stranger", target: base + "default/token", peer: Fixture.stranger, outcome: .refusedRules),
        Case(
            name: "a stranger's email",
            target: base + "default/email",
            peer: Fixture.stranger,
            outcome: .refusedRules
        ),
        Case(
            name: "a scope outside the entry's",
            target: base + "default/token?scopes=https://www.googleapis.com/auth/devstorage.full_control",
            outcome: .refusedScopes
        ),
        Case(name: "an unknown path", target: "/computeMetadata/v1/instance/zone", outcome: .notFound),
        Case(name: "an unknown account", target: base + "nobody@example.com/token", outcome: .notFound),
        Case(name: "identity", target: base + "default/identity", outcome: .notFound),
        Case(name: "POST", target: base + "default/token", method: "POST", outcome: .badMethod),
    ]

    @Test(arguments: cases)
    func eachAnswerHasItsOutcome(_ testCase: Case) async {
        let response = await ask(
            Fixture.router(),
            testCase.target,
            method: testCase.method,
            headers: testCase.headers,
            from: testCase.peer
        )
        #expect(response.outcome == testCase.outcome, "\(response.status) \(response.text)")
        #expect(response.status == testCase.outcome.status)
    }

    @Test func aFailedTokenIsUnavailable() async {
        let tokens = FakeTokenSource(entries: Fixture.entries)
        tokens.setFailing(true)
        let response = await ask(Fixture.router(tokens: tokens), Self.base + "default/token")
        #expect(response.outcome == .unavailable)
        #expect(response.status == 503)
    }

    /// STATS and the metrics name each outcome once, and each `refused_` one is a 403.
    @Test func labelsAreDistinctAndRefusalsAre403() {
        let labels = MetadataOutcome.allCases.map(\.label)
        #expect(Set(labels).count == labels.count)
        for outcome in MetadataOutcome.allCases {
            #expect(outcome.label.hasPrefix("refused_") == (outcome.status == 403), "\(outcome)")
            #expect(outcome.label.allSatisfy { $0.isLowercase || $0 == "_" })
        }
    }
}
