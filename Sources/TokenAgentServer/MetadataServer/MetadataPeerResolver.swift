import LoopbackPeer
import MetadataEndpoint
import NIOCore
import Synchronization

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
///
/// The socket's owner is asked for each connection (it is the socket's alone); the user
/// database's answer is kept per uid for ``userCacheLifetime`` (at most ``userCacheSize`` uids),
/// so that a flood of connections from one user costs a netlink query each and one name-service
/// lookup in that time, never one a connection.
public struct KernelPeerResolver: MetadataPeerResolver {
    private let sockets = LoopbackPeerLookup()
    private let users = UserDatabase()
    private let ambiguousUID: UInt32?
    private let cache = UserCache()

    /// How long a uid's user-database answer is kept.
    public static let userCacheLifetime: TimeAmount = .seconds(10)
    /// How many uids' answers are kept at once; past it, the cache starts over.
    public static let userCacheSize = 4096

    /// The user database's answers by uid, each until it expires.
    final class UserCache: Sendable {
        private let entries = Mutex<[UInt32: (answer: Result<UserGroups, UserDatabaseError>, expires: NIODeadline)]>(
            [:]
        )

        func answer(
            for uid: UInt32,
            _ lookup: () -> Result<UserGroups, UserDatabaseError>
        ) -> Result<UserGroups, UserDatabaseError> {
            let now = NIODeadline.now()
            if let kept = entries.withLock({ $0[uid] }), kept.expires > now { return kept.answer }
            let answer = lookup()
            entries.withLock { entries in
                if entries.count >= KernelPeerResolver.userCacheSize { entries.removeAll() }
                entries[uid] = (answer, now + KernelPeerResolver.userCacheLifetime)
            }
            return answer
        }
    }

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
            let users = self.users
            let looked = cache.answer(for: uid) {
                Result { () throws(UserDatabaseError) in try users.groups(ofUID: uid) }
            }
            let user: UserGroups
            switch looked {
            case .success(let found): user = found
            case .failure(let error): return .unidentified(reason: error.description)
            }
            return .user(MetadataPeer.User(uid: uid, gid: user.primaryGID, groups: user.groups))
        } catch {
            return .unidentified(reason: error.description)
        }
    }
}
