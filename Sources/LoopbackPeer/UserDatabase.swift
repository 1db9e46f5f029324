#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#endif

/// A user as the user database knows them: the uid, its primary group and every group it is in.
public struct UserGroups: Sendable, Hashable {
    /// The user's uid.
    public var uid: UInt32
    /// The user's primary gid (`pw_gid`).
    public var primaryGID: UInt32
    /// Every gid the user is in, primary included (`getgrouplist`), sorted.
    public var groups: [UInt32]

    /// Creates a user's groups.
    public init(uid: UInt32, primaryGID: UInt32, groups: [UInt32]) {
        self.uid = uid
        self.primaryGID = primaryGID
        self.groups = groups
    }
}

/// Why a user's groups could not be read.
public enum UserDatabaseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The user database has no entry for the uid.
    case noSuchUser(uid: UInt32)
    /// `call` failed with `errno`.
    case system(call: String, errno: Int32)
    /// The user database did not answer for the uid in time (`reason`: within how long, or why
    /// it was not asked).
    case unanswered(uid: UInt32, reason: String)

    public var description: String {
        switch self {
        case .noSuchUser(let uid): "uid \(uid) has no entry in the user database"
        case .system(let call, let errno): "\(call) failed: errno \(errno)"
        case .unanswered(let uid, let reason): "the user database did not answer for uid \(uid) \(reason)"
        }
    }
}

/// Reads a uid's groups from the system's user database (NSS: files, LDAP, SSSD, ...), through
/// `getpwuid_r` and `getgrouplist`: what the user is in, not what the peer process holds now (a
/// process may have dropped groups, or gained some with `setgid`). A lookup may block on a
/// network name service: call it off an event loop.
public struct UserDatabase: Sendable {
    /// Creates the lookup.
    public init() {}

    /// The groups of `uid`.
    /// - Throws: ``UserDatabaseError`` when the uid has no entry or a call fails.
    public func groups(ofUID uid: UInt32) throws(UserDatabaseError) -> UserGroups {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 * 1024)
        var status = getpwuid_r(uid, &entry, &buffer, buffer.count, &result)
        while status == ERANGE && buffer.count < 1024 * 1024 {
            buffer = [CChar](repeating: 0, count: buffer.count * 4)
            status = getpwuid_r(uid, &entry, &buffer, buffer.count, &result)
        }
        guard status == 0 else { throw .system(call: "getpwuid_r", errno: status) }
        guard result != nil, let name = entry.pw_name else { throw .noSuchUser(uid: uid) }
        let primary = entry.pw_gid
        var count: Int32 = 32
        var groups = [gid_t](repeating: 0, count: Int(count))
        while getgrouplist(name, primary, &groups, &count) == -1 {
            guard count > Int32(groups.count), count <= 65_536 else {
                throw .system(call: "getgrouplist", errno: errno)
            }
            groups = [gid_t](repeating: 0, count: Int(count))
        }
        var all = Set(groups.prefix(Int(count)))
        all.insert(primary)
        return UserGroups(uid: uid, primaryGID: primary, groups: all.sorted())
    }
}
