import LoopbackPeer
import MetadataEndpoint

/// Tells who is at the other end of a connection to the metadata endpoint.
public protocol MetadataPeerResolver: Sendable {
    /// The user owning `client`'s socket, connected to `server` (the accepted connection's
    /// remote and local addresses), or why it could not be told. May block (a netlink query, a
    /// network name service): the server calls it on a thread pool.
    func peer(client: IPEndpoint, server: IPEndpoint) -> MetadataPeer
}

/// The kernel's answer: the uid owning the client's socket (``LoopbackPeerLookup``, through
/// NETLINK_SOCK_DIAG) with its primary and supplementary groups from the user database
/// (``UserDatabase``). No fallback: no socket, several, a uid without a user-database entry, a
/// failed query, or (outside the initial user namespace) the overflow uid an unmapped owner is
/// reported as (``UserNamespace``) is ``MetadataPeer/unidentified(reason:)``, and gets no
/// entry's data.
public struct KernelPeerResolver: MetadataPeerResolver {
    private let sockets = LoopbackPeerLookup()
    private let users = UserDatabase()
    private let ambiguousUID: UInt32?

    /// Creates the resolver for this process's user namespace.
    public init() {
        self.init(ambiguousUID: UserNamespace.ambiguousUID())
    }

    /// Creates a resolver that takes `ambiguousUID` (the overflow uid of a user namespace other
    /// than the initial one) for nobody in particular.
    public init(ambiguousUID: UInt32?) {
        self.ambiguousUID = ambiguousUID
    }

    public func peer(client: IPEndpoint, server: IPEndpoint) -> MetadataPeer {
        do {
            let uid = try sockets.uid(ofPeer: client, connectedTo: server)
            if uid == ambiguousUID {
                return .unidentified(
                    reason: "uid \(uid) is the overflow uid: the socket's owner is not mapped into the agent's user "
                        + "namespace"
                )
            }
            let user = try users.groups(ofUID: uid)
            return .user(MetadataPeer.User(uid: uid, gid: user.primaryGID, groups: user.groups))
        } catch let error as PeerLookupError {
            return .unidentified(reason: error.description)
        } catch let error as UserDatabaseError {
            return .unidentified(reason: error.description)
        } catch {
            return .unidentified(reason: "\(error)")
        }
    }
}
