import CPeerDiag

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// Tells which user owns the client end of a TCP connection made on this host, by asking the
/// kernel (NETLINK_SOCK_DIAG, `inet_diag`) for the socket whose local end is the client's address
/// and whose remote end is the server's, in the calling process's network namespace.
///
/// TCP carries no credentials: this is how a loopback server learns its peer's uid, as
/// `SO_PEERCRED` tells a Unix socket's. What it reports is the uid that *created* the socket
/// (`idiag_uid`, the socket's `sk_uid`): a descriptor passed to another process (`SCM_RIGHTS`,
/// inheritance over `fork`/`exec`, `pidfd_getfd`) keeps its creator's uid, whoever uses it now,
/// and a socket created before a `setuid` keeps the uid of before. There is no pid, so nothing
/// about the peer's PID namespace can be told.
///
/// Each call opens a netlink socket, sends one query and reads the answer: microseconds, but a
/// system call that can block for at most a second, so callers on an event loop should call it
/// from a thread pool.
public struct LoopbackPeerLookup: Sendable {
    /// Creates a lookup.
    public init() {}

    /// TCP states whose socket reports its owner: established, FIN_WAIT1, FIN_WAIT2, CLOSE_WAIT,
    /// LAST_ACK and CLOSING. TIME_WAIT and request sockets report uid 0 for everyone.
    static let ownedStates: Set<UInt8> = [1, 4, 5, 8, 9, 11]

    /// The uid owning the socket of `client` connected to `server` (both as the server sees them:
    /// the accepted connection's remote and local addresses).
    /// - Throws: ``PeerLookupError``: no such socket, several, one in a state without an owner,
    ///   or a failed query.
    public func uid(ofPeer client: IPEndpoint, connectedTo server: IPEndpoint) throws(PeerLookupError) -> UInt32 {
        guard client.family == server.family else { throw .mixedFamilies(client: client, server: server) }
        var owner = cpd_socket_owner()
        let family = client.family == .ipv4 ? AF_INET : AF_INET6
        let count = client.addressBytes.withUnsafeBufferPointer { source in
            server.addressBytes.withUnsafeBufferPointer { destination in
                cpd_tcp_socket_owner(
                    family,
                    source.baseAddress,
                    client.port,
                    destination.baseAddress,
                    server.port,
                    &owner
                )
            }
        }
        switch count {
        case ..<0: throw .system(call: "NETLINK_SOCK_DIAG query", errno: errno)
        case 0: throw .noSocket(client: client, server: server)
        case 1:
            guard Self.ownedStates.contains(owner.state) else {
                throw .unownedState(client: client, server: server, state: owner.state)
            }
            return owner.uid
        default: throw .severalSockets(client: client, server: server, count: Int(count))
        }
    }
}
