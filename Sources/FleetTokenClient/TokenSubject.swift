import TokenWire

/// What a token is for: a kind (`vehicle`, `trip`, ...) and an id.
///
/// ```swift
/// let token = try await client.token(.vehicle("v-1"))
/// ```
public struct TokenSubject: Sendable, Hashable, CustomStringConvertible {
    /// The kind name, as the agent is configured (`vehicle`, `trip`, `delivery-vehicle`, ...).
    public var kind: String
    /// The Fleet Engine id.
    public var id: String

    /// A subject of any configured kind; `.kind("access", name)` is ``accessToken(_:)``.
    public static func kind(_ kind: String, _ id: String) -> TokenSubject {
        kind == AccessTokenKind.wireKind ? accessToken(id) : TokenSubject(kind: kind, id: id)
    }
    /// The OAuth 2.0 access token of the agent's `access_tokens` entry `name` (`GET access <name>`),
    /// for a backend's own Google API calls: its ``Token/jwt`` is the opaque Bearer token. The
    /// entry is a kind of its own, `access:<name>`, whose one id is the name.
    public static func accessToken(_ name: String) -> TokenSubject {
        TokenSubject(kind: AccessTokenKind.kind(name: name), id: name)
    }
    /// A vehicle token (Driver SDK, on-demand trips).
    public static func vehicle(_ id: String) -> TokenSubject { TokenSubject(kind: "vehicle", id: id) }
    /// A trip token (Consumer SDK).
    public static func trip(_ id: String) -> TokenSubject { TokenSubject(kind: "trip", id: id) }
    /// A delivery vehicle token.
    public static func deliveryVehicle(_ id: String) -> TokenSubject { TokenSubject(kind: "delivery-vehicle", id: id) }
    /// A task token.
    public static func task(_ id: String) -> TokenSubject { TokenSubject(kind: "task", id: id) }
    /// A tracking token.
    public static func tracking(_ id: String) -> TokenSubject { TokenSubject(kind: "tracking", id: id) }
    /// The whole-fleet server token of on-demand trips (`vehicleid` and `tripid` `*`); served only
    /// by an agent with an issuer configured for the kind `server`, to whom its rule allows.
    public static let server = TokenSubject(kind: "server", id: "*")
    /// The whole-fleet server token of scheduled tasks (`deliveryvehicleid`, `taskid`, `trackingid`
    /// `*`).
    public static let deliveryServer = TokenSubject(kind: "delivery-server", id: "*")
    /// The whole-fleet read-only token of both services.
    public static let fleetReader = TokenSubject(kind: "fleet-reader", id: "*")
    /// The whole-fleet read-only token of scheduled tasks.
    public static let deliveryFleetReader = TokenSubject(kind: "delivery-fleet-reader", id: "*")

    /// Creates a subject.
    public init(kind: String, id: String) {
        self.kind = kind
        self.id = id
    }

    public var description: String { "\(kind)/\(id)" }

    /// Subjects are the same when their kinds and ids have the same UTF-8 bytes, as the agent
    /// sees them (``ByteKey``, which says why not `String`'s own `==`).
    // Read-only, said so: the optimizer then calls it on a dictionary's keys in place, as it did
    // when the comparison was this module's own, without retaining them around the call.
    @_effects(readonly)
    public static func == (lhs: TokenSubject, rhs: TokenSubject) -> Bool {
        ByteKey.equal(kind: lhs.kind, id: lhs.id, rhs.kind, rhs.id)
    }

    /// Hashes the kind's and the id's UTF-8 bytes (see ``==(_:_:)``).
    public func hash(into hasher: inout Hasher) {
        ByteKey.hash(kind: kind, id: id, into: &hasher)
    }
}
