/// Who is asking, as far as the server could tell.
public enum MetadataPeer: Sendable, Hashable {
    /// A user of this host, with its groups.
    public struct User: Sendable, Hashable {
        /// The uid owning the client's socket.
        public var uid: UInt32
        /// The user's primary gid.
        public var gid: UInt32
        /// Every group the user is in.
        public var groups: [UInt32]

        /// A user.
        public init(uid: UInt32, gid: UInt32, groups: [UInt32]) {
            self.uid = uid
            self.gid = gid
            self.groups = groups
        }
    }

    /// The peer is `User`.
    case user(User)
    /// The peer could not be told (`reason`): it gets no entry's data.
    case unidentified(reason: String)
}
