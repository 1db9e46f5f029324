import MetadataEndpoint
import Synchronization
import Testing

/// A token source with fixed entries that counts its calls, and fails on demand.
final class FakeTokenSource: MetadataTokenSource {
    struct Failure: Error, CustomStringConvertible {
        var description: String { "IAM said no (secret detail)" }
    }

    let entries: [MetadataEntry]
    private let state = Mutex<(calls: [String], failing: Bool)>(([], false))
    let expiresAt: Double

    init(entries: [MetadataEntry], expiresAt: Double = 1_000_000 + 3_599.9) {
        self.entries = entries
        self.expiresAt = expiresAt
    }

    /// The entries asked for, in order.
    var calls: [String] { state.withLock { $0.calls } }

    /// Makes every later call fail (or succeed again).
    func setFailing(_ failing: Bool) { state.withLock { $0.failing = failing } }

    func token(for entry: MetadataEntry) async throws -> MetadataToken {
        let failing = state.withLock { state in
            state.calls.append(entry.name)
            return state.failing
        }
        if failing { throw Failure() }
        return MetadataToken(accessToken: "ya29.token-of-\(entry.name)", expiresAt: expiresAt)
    }
}

/// The entries the tests serve: `fleet-admin` (the default) for uid 1000 and group 2000;
/// `reader` for uid 1001, of another account; `admin-narrow`, the default's account with fewer
/// scopes, for uid 1002 only; `elsewhere`, an account outside `iam.gserviceaccount.com`.
enum Fixture {
    static let adminAccount = "fleet-admin@fleet-prod.iam.gserviceaccount.com"
    static let readerAccount = "reader@fleet-prod.iam.gserviceaccount.com"
    static let cloudPlatform = "https://www.googleapis.com/auth/cloud-platform"
    static let email = "https://www.googleapis.com/auth/userinfo.email"
    static let now = 1_000_000.0

    static let entries = [
        MetadataEntry(
            name: "fleet-admin",
            account: adminAccount,
            scopes: [cloudPlatform, email],
            allowedUIDs: [1000],
            allowedGIDs: [2000]
        ),
        MetadataEntry(
            name: "reader",
            account: readerAccount,
            scopes: [cloudPlatform],
            allowedUIDs: [1001],
            allowedGIDs: []
        ),
        MetadataEntry(
            name: "admin-narrow",
            account: adminAccount,
            scopes: [email],
            allowedUIDs: [1002],
            allowedGIDs: []
        ),
        MetadataEntry(
            name: "elsewhere",
            account: "123-compute@developer.gserviceaccount.com",
            scopes: [cloudPlatform],
            allowedUIDs: [1000],
            allowedGIDs: []
        ),
    ]

    static let listen = try! MetadataListenAddress(parsing: "127.0.0.1:8989")

    static func router(
        tokens: FakeTokenSource = FakeTokenSource(entries: entries),
        defaultEntry: String = "fleet-admin",
        projectID: String? = nil,
        listen: MetadataListenAddress = listen
    ) -> MetadataRouter {
        MetadataRouter(
            configuration: MetadataServerConfiguration(
                listen: listen,
                defaultEntry: defaultEntry,
                projectID: projectID
            ),
            tokens: tokens,
            now: { now }
        )
    }

    static let admin = MetadataPeer.user(.init(uid: 1000, gid: 1000, groups: [1000]))
    static let reader = MetadataPeer.user(.init(uid: 1001, gid: 1001, groups: [1001]))
    static let narrow = MetadataPeer.user(.init(uid: 1002, gid: 1002, groups: [1002]))
    static let root = MetadataPeer.user(.init(uid: 0, gid: 0, groups: [0]))
    static let stranger = MetadataPeer.user(.init(uid: 4242, gid: 4242, groups: [4242]))
}

/// Asks `router` for `target` the way google-auth does (`Host: 127.0.0.1:8989`,
/// `Metadata-Flavor: Google`), with `headers` replacing or adding fields (a `nil` value removes
/// one), and checks what every answer must have: `Metadata-Flavor: Google`, a content type, and
/// no CORS field.
func ask(
    _ router: MetadataRouter,
    _ target: String,
    method: String = "GET",
    headers: [(String, String?)] = [],
    from peer: MetadataPeer = Fixture.admin
) async -> MetadataResponse {
    var fields: [(name: String, value: String)] = [("Host", "127.0.0.1:8989"), ("Metadata-Flavor", "Google")]
    for (name, value) in headers {
        fields.removeAll { $0.name.lowercased() == name.lowercased() }
        if let value { fields.append((name, value)) }
    }
    let response = await router.respond(
        to: MetadataRequest(method: method, target: target, headers: fields),
        from: peer
    )
    checkInvariants(response)
    return response
}

/// What every answer must have: `Metadata-Flavor: Google`, a content type, no CORS field, and
/// an outcome of its status.
func checkInvariants(_ response: MetadataResponse, sourceLocation: SourceLocation = #_sourceLocation) {
    #expect(response.outcome.status == response.status, sourceLocation: sourceLocation)
    #expect(response.value(of: "Metadata-Flavor") == "Google", sourceLocation: sourceLocation)
    #expect(response.value(of: "Content-Type") != nil, sourceLocation: sourceLocation)
    #expect(
        !response.headers.contains { $0.name.lowercased().hasPrefix("access-control-") },
        sourceLocation: sourceLocation
    )
}
