import TokenWire

/// The cache key: a kind (`vehicle`, `trip`, ...) and an id.
public struct TokenKey: Hashable, Sendable, CustomStringConvertible {
    /// The kind name, as configured.
    public var kind: String
    /// The Fleet Engine id (vehicle id, trip id, ...).
    public var id: String

    /// Creates a key.
    public init(kind: String, id: String) {
        self.kind = kind
        self.id = id
    }

    public var description: String { "\(kind)/\(id)" }

    /// Keys are the same when their kinds and ids have the same UTF-8 bytes, as the agent, the
    /// provider and Fleet Engine see them (``ByteKey``, which says why not `String`'s own `==`).
    // Read-only, said so: the optimizer then calls it on a dictionary's keys in place, as it did
    // when the comparison was this module's own, without retaining them around the call.
    @_effects(readonly)
    public static func == (lhs: TokenKey, rhs: TokenKey) -> Bool {
        ByteKey.equal(kind: lhs.kind, id: lhs.id, rhs.kind, rhs.id)
    }

    /// Hashes the kind's and the id's UTF-8 bytes (see ``==(_:_:)``).
    public func hash(into hasher: inout Hasher) {
        ByteKey.hash(kind: kind, id: id, into: &hasher)
    }
}

/// What Fleet Engine calls the id of each well-known kind inside a JWT's `authorization` claim.
public enum FleetEngineKinds {
    /// The authorization claim name for each well-known kind.
    public static let claimNames: [String: String] = [
        "vehicle": "vehicleid",
        "trip": "tripid",
        "delivery-vehicle": "deliveryvehicleid",
        "task": "taskid",
        "tracking": "trackingid",
    ]

    /// The well-known kinds, in a stable order.
    public static let all = ["vehicle", "trip", "delivery-vehicle", "task", "tracking"]
}

/// A token as a provider handed it over: the JWT text and its absolute expiry.
public struct FetchedToken: Sendable, Hashable {
    /// The token text (usually a JWT).
    public var token: String
    /// When the token expires, on the wall clock (the JWT's `exp`, or the provider's reply).
    public var expiresAt: UnixTime

    /// Creates a fetched token.
    public init(token: String, expiresAt: UnixTime) {
        self.token = token
        self.expiresAt = expiresAt
    }

    /// Creates a fetched token expiring `expiresAtUnixSeconds` after the Unix epoch.
    public init(token: String, expiresAtUnixSeconds: Double) {
        self.init(token: token, expiresAt: UnixTime(seconds: expiresAtUnixSeconds))
    }
}
