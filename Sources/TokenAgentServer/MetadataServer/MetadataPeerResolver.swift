import Dispatch
import LoopbackPeer
import MetadataEndpoint
import NIOCore
import Synchronization
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

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
///
/// A name service that hangs (LDAP or SSSD unreachable) holds up only the uids it has not
/// answered: each lookup runs on a thread of its own (one at a time per uid, at most
/// ``maxLookupsInFlight`` at once), and a connection waits for it at most ``lookupTimeout``,
/// then is unidentified (`the user database did not answer for uid N within 2 s`). A lookup that
/// ends later fills the cache for the next connection. Connections of uids already answered go on
/// as before, whatever the name service does.
public struct KernelPeerResolver: MetadataPeerResolver {
    private let sockets = LoopbackPeerLookup()
    private let users = UserDatabase()
    private let ambiguousUID: UInt32?
    private let cache: UserCache

    /// How long a uid's user-database answer is kept.
    public static let userCacheLifetime: TimeAmount = .seconds(10)
    /// How many uids' answers are kept at once; past it, the cache starts over.
    public static let userCacheSize = 4096
    /// How long a connection waits for the user database's answer.
    public static let lookupTimeout: TimeAmount = .seconds(2)
    /// How many user-database lookups may run at once (each on a thread of its own); past it, a
    /// connection of a uid not yet answered is unidentified at once.
    public static let maxLookupsInFlight = 16

    /// The user database's answers by uid, each until it expires, and the lookups under way.
    public final class UserCache: Sendable {
        public typealias Answer = Result<UserGroups, UserDatabaseError>

        private struct State {
            var entries: [UInt32: (answer: Answer, expires: NIODeadline)] = [:]
            var inFlight: [UInt32: Lookup] = [:]
        }

        /// A lookup under way, and when its waiters give up.
        private final class Lookup: Sendable {
            let done = DispatchGroup()
            let deadline: NIODeadline
            init(deadline: NIODeadline) { self.deadline = deadline }
        }

        private let state = Mutex(State())
        private let lifetime: TimeAmount
        private let timeout: TimeAmount
        private let maxInFlight: Int

        /// A cache keeping answers `lifetime`, waiting `timeout` for a lookup, running at most
        /// `maxInFlight` at once.
        public init(
            lifetime: TimeAmount = KernelPeerResolver.userCacheLifetime,
            timeout: TimeAmount = KernelPeerResolver.lookupTimeout,
            maxInFlight: Int = KernelPeerResolver.maxLookupsInFlight
        ) {
            self.lifetime = lifetime
            self.timeout = timeout
            self.maxInFlight = maxInFlight
        }

        /// `uid`'s answer: the cached one, else the one `lookup` gives (run on a thread of its
        /// own, joined when one for `uid` is already under way) within the time-out. Blocks the
        /// caller (a thread-pool thread) at most the time-out.
        public func answer(for uid: UInt32, _ lookup: @escaping @Sendable () -> Answer) -> Answer {
            let now = NIODeadline.now()
            enum Step {
                case answered(Answer)
                case wait(Lookup)
                case start(Lookup)
            }
            let step = state.withLock { state -> Step in
                if let kept = state.entries[uid], kept.expires > now { return .answered(kept.answer) }
                if let running = state.inFlight[uid] { return .wait(running) }
                guard state.inFlight.count < maxInFlight else {
                    return .answered(
                        .failure(.unanswered(uid: uid, reason: "\(maxInFlight) lookups already wait for it"))
                    )
                }
                let started = Lookup(deadline: now + timeout)
                started.done.enter()
                state.inFlight[uid] = started
                return .start(started)
            }
            let running: Lookup
            switch step {
            case .answered(let answer): return answer
            case .wait(let lookup): running = lookup
            case .start(let started):
                running = started
                let launched = DetachedThread.start { [self] in
                    let answer = lookup()
                    finish(uid, started, answer)
                }
                if !launched { finish(uid, started, .failure(.system(call: "pthread_create", errno: EAGAIN))) }
            }
            let left = running.deadline - NIODeadline.now()
            let waited =
                left.nanoseconds > 0
                ? running.done.wait(timeout: .now() + .nanoseconds(Int(left.nanoseconds))) : .timedOut
            if waited == .success, let kept = state.withLock({ $0.entries[uid] }) { return kept.answer }
            return .failure(.unanswered(uid: uid, reason: "within \(Self.seconds(timeout)) s"))
        }

        /// Keeps `answer` and lets the waiters go.
        private func finish(_ uid: UInt32, _ lookup: Lookup, _ answer: Answer) {
            state.withLock { state in
                if state.entries.count >= KernelPeerResolver.userCacheSize { state.entries.removeAll() }
                state.entries[uid] = (answer, NIODeadline.now() + lifetime)
                if state.inFlight[uid] === lookup { state.inFlight[uid] = nil }
            }
            lookup.done.leave()
        }

        private static func seconds(_ amount: TimeAmount) -> String {
            let seconds = Double(amount.nanoseconds) / 1e9
            return seconds == seconds.rounded() ? "\(Int(seconds))" : "\(seconds)"
        }
    }

    /// Creates the resolver for this process's user namespace.
    public init() {
        self.init(ambiguousUID: UserNamespace.ambiguousUID())
    }

    /// Creates a resolver that takes `ambiguousUID` (the overflow uid of a user namespace other
    /// than the initial one) for nobody in particular.
    public init(ambiguousUID: UInt32?, cache: UserCache = UserCache()) {
        self.ambiguousUID = ambiguousUID
        self.cache = cache
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
