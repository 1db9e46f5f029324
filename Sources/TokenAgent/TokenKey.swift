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
    /// provider and Fleet Engine see them. `String`'s own `==` treats canonically equivalent
    /// texts as equal (a precomposed `é` and `e` with a combining accent), which would let a
    /// fetch for one id answer a request for the other.
    public static func == (lhs: TokenKey, rhs: TokenKey) -> Bool {
        lhs.kind.utf8.elementsEqual(rhs.kind.utf8) && lhs.id.utf8.elementsEqual(rhs.id.utf8)
    }

    /// Hashes the kind's and the id's UTF-8 bytes (see ``==(_:_:)``).
    public func hash(into hasher: inout Hasher) {
        Self.combineBytes(of: kind, into: &hasher)
        hasher.combine(0xFF as UInt8)  // never in UTF-8: ends the kind
        Self.combineBytes(of: id, into: &hasher)
    }

    private static func combineBytes(of text: String, into hasher: inout Hasher) {
        let done: Void? = text.utf8.withContiguousStorageIfAvailable {
            hasher.combine(bytes: UnsafeRawBufferPointer($0))
        }
        if done == nil {
            for byte in text.utf8 { hasher.combine(byte) }
        }
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
