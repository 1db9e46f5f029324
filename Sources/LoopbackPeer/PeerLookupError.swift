/// Why the owner of a connection's other end could not be told.
public enum PeerLookupError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The two ends are of different address families.
    case mixedFamilies(client: IPEndpoint, server: IPEndpoint)
    /// The kernel knows no TCP socket with that 4-tuple in this network namespace (the peer
    /// closed, or it is in another namespace, or on another host).
    case noSocket(client: IPEndpoint, server: IPEndpoint)
    /// More than one socket matched: the owner is ambiguous.
    case severalSockets(client: IPEndpoint, server: IPEndpoint, count: Int)
    /// The socket is in a state whose owner the kernel does not report (TIME_WAIT, a
    /// half-open request); `state` is the kernel's TCP state number.
    case unownedState(client: IPEndpoint, server: IPEndpoint, state: UInt8)
    /// The netlink query failed: `errno` (EAFNOSUPPORT or EPERM when `AF_NETLINK` is not allowed,
    /// as under systemd's `RestrictAddressFamilies` without it).
    case system(call: String, errno: Int32)

    public var description: String {
        switch self {
        case .mixedFamilies(let client, let server):
            "client \(client) and server \(server) are of different address families"
        case .noSocket(let client, let server):
            "no TCP socket from \(client) to \(server) in the agent's network namespace"
        case .severalSockets(let client, let server, let count):
            "\(count) TCP sockets from \(client) to \(server): the owner is ambiguous"
        case .unownedState(let client, let server, let state):
            "the TCP socket from \(client) to \(server) is in state \(state), which has no owner"
        case .system(let call, let errno):
            "\(call) failed: errno \(errno)"
        }
    }
}
