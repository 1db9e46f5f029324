import TokenWire

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Looks users and groups up by name (NSS in the agent; a table in tests).
public protocol PrincipalResolver: Sendable {
    /// The uid of user `name`, if it exists.
    func uid(ofUser name: String) -> UInt32?
    /// The gid of group `name`, if it exists.
    func gid(ofGroup name: String) -> UInt32?
}

/// Resolves names through the system's name service (`getpwnam_r`, `getgrnam_r`): files, LDAP,
/// SSSD, whatever NSS is configured with.
public struct SystemPrincipalResolver: PrincipalResolver {
    /// Creates the resolver.
    public init() {}

    public func uid(ofUser name: String) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    public func gid(ofGroup name: String) -> UInt32? {
        var entry = group()
        var result: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 64 * 1024)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }
}

/// The access rules in numbers, checked on every request: which peers may ask for each kind, and
/// which may use the operator verbs.
///
/// Rules made for a configuration know its kinds (``kinds``): a kind outside them is not served
/// under these rules at all, so that a reload, which puts new rules in force before the engine
/// learns new kinds and forgets old ones, never lets a kind be served without the rules of its
/// own generation.
///
/// The agent's own uid and uid 0 pass every rule: on a host they can read the agent's memory
/// anyway. In a container host, root, or the agent's uid, may be any pod's user, which cannot:
/// there `trust_root: false` makes uid 0 an ordinary uid, and lets the agent's uid pass only from
/// a process in the agent's own PID namespace (an `exec` into its container).
public struct AccessRules: Sendable, Hashable {
    /// What the rules say of a peer's request for a kind.
    public enum Verdict: Sendable, Hashable {
        case allowed
        case denied
        /// The kind is not one of the configuration these rules were made for.
        case notConfigured
    }

    /// The numeric form of a ``PrincipalList``.
    public struct Principals: Sendable, Hashable {
        /// Allowed uids.
        public var uids: Set<UInt32>
        /// Allowed gids (primary or supplementary).
        public var gids: Set<UInt32>

        /// Creates a set of users and groups.
        public init(uids: Set<UInt32> = [], gids: Set<UInt32> = []) {
            self.uids = uids
            self.gids = gids
        }

        /// Whether `peer` is one of these users or in one of these groups.
        public func match(_ peer: PeerCredentials) -> Bool {
            uids.contains(peer.uid) || gids.contains(peer.gid) || peer.groups.contains(where: gids.contains)
        }
    }

    /// Per kind with rules, who may ask.
    public private(set) var allow: [String: Principals]
    /// Who may use the operator verbs; `nil` when they are open.
    public var admin: Principals?
    /// The agent's own uid (always allowed).
    public var agentUID: UInt32
    /// Whether uid 0 passes every rule (`trust_root`, default on).
    public var trustRoot: Bool
    /// The configured kinds these rules are for, sorted; `nil`: rules for whatever kinds the
    /// engine serves (rules made without a configuration, as in tests).
    public let kinds: [String]?
    /// Each configured kind's rule (`nil` for an open kind), one lookup a request; set with `kinds`.
    private let byKind: [String: Principals?]

    /// No rules: every kind and verb is open to whoever can open the socket.
    public static func open(agentUID: UInt32 = UInt32(getuid())) -> AccessRules {
        AccessRules(allow: [:], admin: nil, agentUID: agentUID)
    }

    /// Creates rules from numbers, for the configured `kinds` when given (see ``kinds``).
    public init(
        allow: [String: Principals],
        admin: Principals?,
        agentUID: UInt32,
        trustRoot: Bool = true,
        kinds: Set<String>? = nil
    ) {
        self.allow = allow
        self.admin = admin
        self.agentUID = agentUID
        self.trustRoot = trustRoot
        self.kinds = kinds?.sorted()
        var byKind: [String: Principals?] = [:]
        for kind in kinds ?? [] { byKind[kind] = .some(allow[kind]) }
        self.byKind = byKind
    }

    /// Whether `peer` may ask for tokens of `kind` (``verdict(_:kind:)`` is `allowed`).
    public func allows(_ peer: PeerCredentials?, kind: String) -> Bool { verdict(peer, kind: kind) == .allowed }

    /// What these rules say of `peer` asking for `kind`. A peer whose credentials are unknown
    /// passes only kinds without rules; a kind outside ``kinds`` is `notConfigured`.
    public func verdict(_ peer: PeerCredentials?, kind: String) -> Verdict {
        let rule: Principals?
        if kinds != nil {
            guard let entry = byKind[kind] else { return .notConfigured }
            rule = entry
        } else {
            rule = allow[kind]
        }
        guard let rule else { return .allowed }
        guard let peer else { return .denied }
        return isPrivileged(peer) || rule.match(peer) ? .allowed : .denied
    }

    /// Whether `peer` may use the operator verbs (`DROP`, `STATS`).
    public func allowsAdmin(_ peer: PeerCredentials?) -> Bool {
        guard let admin else { return true }
        guard let peer else { return false }
        return isPrivileged(peer) || admin.match(peer)
    }

    /// uid 0 with ``trustRoot``; the agent's own uid, and without ``trustRoot`` only from a process
    /// in the agent's own PID namespace (``PeerCredentials/inAgentPIDNamespace``, not merely a
    /// visible pid: a child namespace's processes have those): in a container host, a pod of
    /// another namespace may run as any uid, the agent's included, and read nothing of the agent's.
    private func isPrivileged(_ peer: PeerCredentials) -> Bool {
        if trustRoot { return peer.uid == 0 || peer.uid == agentUID }
        return peer.uid == agentUID && peer.inAgentPIDNamespace
    }

    /// The kinds among `kinds` whose readers `new` rules decide differently from these.
    public func kindsWithChangedRules(to new: AccessRules, kinds: Set<String>) -> Set<String> {
        if new.agentUID != agentUID || new.trustRoot != trustRoot { return kinds }
        return kinds.filter { allow[$0] != new.allow[$0] }
    }

    public static func == (lhs: AccessRules, rhs: AccessRules) -> Bool {
        lhs.allow == rhs.allow && lhs.admin == rhs.admin && lhs.agentUID == rhs.agentUID
            && lhs.trustRoot == rhs.trustRoot && lhs.kinds == rhs.kinds
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(allow)
        hasher.combine(admin)
        hasher.combine(agentUID)
        hasher.combine(trustRoot)
        hasher.combine(kinds)
    }

    /// Resolves `configuration`'s names. With `strict` (a reload), a name that does not resolve is
    /// an error naming its key; without (start-up, when NSS or LDAP may come up late), it is a
    /// warning and the entry matches nobody.
    /// - Returns: the rules, and one warning per name that did not resolve.
    /// - Parameter kinds: the configured kinds the rules are for (see ``kinds``).
    public static func resolve(
        _ configuration: AccessConfiguration,
        agentUID: UInt32 = UInt32(getuid()),
        resolver: any PrincipalResolver = SystemPrincipalResolver(),
        kinds: Set<String>? = nil,
        strict: Bool
    ) throws -> (rules: AccessRules, warnings: [String]) {
        var warnings: [String] = []
        /// The numbers of `references`; a name `lookup` cannot resolve is an error (strict) or a
        /// warning, and matches nobody.
        func numbers(
            _ references: [PrincipalReference],
            key: String,
            noun: String,
            lookup: (String) -> UInt32?
        ) throws -> Set<UInt32> {
            var resolved: Set<UInt32> = []
            for reference in references {
                switch reference {
                case .number(let number): resolved.insert(number)
                case .name(let name):
                    if let number = lookup(name) {
                        resolved.insert(number)
                    } else {
                        let problem = "\(noun) \(name) does not exist"
                        if strict { throw ConfigurationError(key: key, problem) }
                        warnings.append("\(key): \(problem); it matches nobody until a reload")
                    }
                }
            }
            return resolved
        }
        func principals(_ list: PrincipalList, key: String) throws -> Principals {
            Principals(
                uids: try numbers(list.users, key: key + ".users", noun: "user", lookup: resolver.uid(ofUser:)),
                gids: try numbers(list.groups, key: key + ".groups", noun: "group", lookup: resolver.gid(ofGroup:))
            )
        }
        var allow: [String: Principals] = [:]
        for (kind, list) in configuration.allow.sorted(by: { $0.key < $1.key }) {
            // An access-token entry's rules are in its own object.
            let key = AccessTokenKind.name(ofKind: kind).map { "access_tokens.\($0).allow" } ?? "allow.\(kind)"
            allow[kind] = try principals(list, key: key)
        }
        let admin = try configuration.admin.map { try principals($0, key: "admin") }
        let rules = AccessRules(
            allow: allow,
            admin: admin,
            agentUID: agentUID,
            trustRoot: configuration.trustRoot,
            kinds: kinds
        )
        return (rules, warnings)
    }
}
