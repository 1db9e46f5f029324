/// A user or group named in the access rules: by name (resolved through NSS) or by number.
public enum PrincipalReference: Sendable, Hashable, CustomStringConvertible {
    /// A name, e.g. `dispatcher`.
    case name(String)
    /// A numeric user or group id.
    case number(UInt32)

    public var description: String {
        switch self {
        case .name(let name): return name
        case .number(let number): return "\(number)"
        }
    }
}

/// A list of users and groups (the config file's `{"users": [...], "groups": [...]}`).
public struct PrincipalList: Sendable, Hashable {
    /// Users, by name or uid.
    public var users: [PrincipalReference]
    /// Groups, by name or gid; a peer matches when it is in the group as its primary or a
    /// supplementary group.
    public var groups: [PrincipalReference]

    /// Creates a list.
    public init(users: [PrincipalReference] = [], groups: [PrincipalReference] = []) {
        self.users = users
        self.groups = groups
    }
}

/// Who may ask for what, as configured: the `allow` lists per kind and the `admin` list. Names are
/// resolved into numbers by ``AccessRules/resolve(_:agentUID:resolver:strict:)``.
public struct AccessConfiguration: Sendable, Hashable {
    /// Per kind, who may ask for its tokens. A kind without an entry is open to whoever can open
    /// the socket.
    public var allow: [String: PrincipalList]
    /// Who may use the operator verbs (`DROP`, `STATS`); `nil` leaves them open.
    public var admin: PrincipalList?
    /// Whether uid 0 passes every rule (`trust_root`, default on). Off in containers, where root
    /// may be any pod's user and cannot read the agent's memory.
    public var trustRoot: Bool

    /// Creates a configuration; the default has no rules at all.
    public init(allow: [String: PrincipalList] = [:], admin: PrincipalList? = nil, trustRoot: Bool = true) {
        self.allow = allow
        self.admin = admin
        self.trustRoot = trustRoot
    }
}
