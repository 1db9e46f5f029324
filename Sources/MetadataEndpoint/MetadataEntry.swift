/// An access-token entry as the metadata endpoint serves it: whose token, with which scopes, to
/// whom.
public struct MetadataEntry: Sendable, Hashable {
    /// The entry's name (`access_tokens.<name>`).
    public var name: String
    /// The service account's email, served at `service-accounts/<default|email>/email`.
    public var account: String
    /// The scopes the entry's token carries: a request's `scopes=` must be among them.
    public var scopes: [String]
    /// The uids allowed the token.
    public var allowedUIDs: Set<UInt32>
    /// The gids whose members are allowed the token (a user's primary group or any other).
    public var allowedGIDs: Set<UInt32>

    /// An entry.
    public init(name: String, account: String, scopes: [String], allowedUIDs: Set<UInt32>, allowedGIDs: Set<UInt32>) {
        self.name = name
        self.account = account
        self.scopes = scopes
        self.allowedUIDs = allowedUIDs
        self.allowedGIDs = allowedGIDs
    }

    /// Whether `user` may have the entry's token: its uid, its primary gid or one of its groups
    /// is allowed. No uid passes otherwise, root and the agent's own included.
    public func allows(_ user: MetadataPeer.User) -> Bool {
        allowedUIDs.contains(user.uid) || allowedGIDs.contains(user.gid)
            || user.groups.contains(where: allowedGIDs.contains)
    }
}
