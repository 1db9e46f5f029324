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

    /// A subject of any configured kind.
    public static func kind(_ kind: String, _ id: String) -> TokenSubject { TokenSubject(kind: kind, id: id) }
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

    /// Creates a subject.
    public init(kind: String, id: String) {
        self.kind = kind
        self.id = id
    }

    public var description: String { "\(kind)/\(id)" }
}
