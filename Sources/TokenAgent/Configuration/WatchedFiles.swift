#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a look at the watched files saw: per path, the identity and time of the file it leads to.
///
/// Paths are followed through symbolic links, so Kubernetes' update of a mounted ConfigMap or
/// Secret (the `..data` link swapped to a new directory in one rename) is a new inode at the
/// same path. A file that is missing or unreadable is recorded as missing.
public struct WatchedFiles: Sendable, Hashable {
    /// The state of one file, `nil` in ``states`` when it cannot be examined.
    public struct State: Sendable, Hashable {
        /// The device and inode the path leads to.
        public var device: UInt64
        public var inode: UInt64
        /// The size in bytes.
        public var size: Int64
        /// The modification and status-change times, nanoseconds since the epoch.
        public var modified: Int64
        public var changed: Int64
    }

    /// Per watched path, its state.
    public let states: [String: State?]

    /// Looks at `paths` now.
    public init(paths: some Sequence<String>) {
        var states: [String: State?] = [:]
        for path in paths { states[path] = Self.state(of: path) }
        self.states = states
    }

    /// The paths whose state differs between `self` and `other` (or that only one watches), sorted.
    public func changedPaths(since other: WatchedFiles) -> [String] {
        Set(states.keys).union(other.states.keys).filter { states[$0] != other.states[$0] }.sorted()
    }

    /// `other`'s paths, each with the state this look saw when it watched it, else `other`'s.
    public func restricted(to other: WatchedFiles) -> WatchedFiles {
        var merged: [String: State?] = [:]
        for (path, state) in other.states {
            if let seen = states[path] { merged[path] = seen } else { merged[path] = state }
        }
        return WatchedFiles(states: merged)
    }

    private init(states: [String: State?]) { self.states = states }

    private static func state(of path: String) -> State? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return State(
            device: UInt64(info.st_dev),
            inode: UInt64(info.st_ino),
            size: Int64(info.st_size),
            modified: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            changed: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        )
    }
}

extension AgentConfiguration {
    /// The files this configuration names, which a reload reads again: the key files, the
    /// providers' header files, and the host credentials file of `$GOOGLE_APPLICATION_CREDENTIALS`
    /// when a key-less issuer uses it. Sorted, without the config file itself.
    public func namedFiles(environment: [String: String]) -> [String] {
        var files: Set<String> = []
        if let issuerKeyPath { files.insert(issuerKeyPath) }
        for settings in issuers.values {
            if let keyFile = settings.keyFile { files.insert(keyFile) }
        }
        for settings in providers.values {
            if let headersFile = settings.headersFile { files.insert(headersFile) }
        }
        if needsHostCredentials, let credentials = environment["GOOGLE_APPLICATION_CREDENTIALS"],
            !credentials.isEmpty
        {
            files.insert(credentials)
        }
        return files.sorted()
    }
}
