import TokenWire

/// The `authorization` claim an issuer writes for each kind: `{<claim>: <id>}` for a per-id kind
/// (Fleet Engine's five, or a custom kind with its own `claim`), and the fixed wildcard entries of
/// the four kinds that act for the whole fleet.
public struct IssuerClaims: Sendable, Hashable {
    /// The `authorization` entries of each wildcard kind (the wildcard token types of Google's
    /// Fleet Engine auth library), all `*`.
    public static let wildcardEntries: [String: [String]] = [
        "server": ["vehicleid", "tripid"],
        "delivery-server": ["deliveryvehicleid", "taskid", "trackingid"],
        "fleet-reader": ["vehicleid", "tripid", "deliveryvehicleid", "taskid", "trackingid"],
        "delivery-fleet-reader": ["deliveryvehicleid", "taskid", "trackingid"],
    ]

    /// The claim naming the id, by per-id kind.
    public var claimNames: [String: String]

    /// Claims for the well-known kinds, with `claimNames` added or overriding.
    public init(claimNames: [String: String] = FleetEngineKinds.claimNames) {
        self.claimNames = claimNames
    }

    /// The `authorization` object of a token for `id` of `kind`, or `nil` when the issuer cannot
    /// sign it: a kind it has no claim for, a wildcard kind asked for another id than `*`, or a
    /// per-id kind asked for `*`, `.` or `..`.
    public func authorization(kind: String, id: String) -> [String: String]? {
        if let entries = Self.wildcardEntries[kind] {
            guard id == TokenIdentifier.wildcardID else { return nil }
            return Dictionary(uniqueKeysWithValues: entries.map { ($0, TokenIdentifier.wildcardID) })
        }
        guard let claim = claimNames[kind], TokenIdentifier.reservedProblem(id.utf8) == nil else { return nil }
        return [claim: id]
    }

    /// Whether `name` can be an `authorization` claim name: 1 to 64 of `a-z` and `0-9`.
    public static func isClaimName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64
            && name.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) }
    }
}
