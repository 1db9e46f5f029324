import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

extension CacheFile {
    /// What `fleet-tokend check-config` finds of the cache file: its directory checked as
    /// ``prepare()`` checks it at start, but with nothing created, and the file as a start would
    /// read it.
    public struct Inspection: Sendable {
        /// The file system the file is (or, in a directory still to be made, would be) on: `tmpfs`,
        /// `ext2/ext3/ext4`, ..., or `statfs type 0x...` for one without a name here.
        public var fileSystem: String
        /// Whether that file system is memory-backed (tmpfs or ramfs).
        public var memoryBacked: Bool
        /// The first directory on the way that does not exist yet: the agent creates it (mode
        /// 0700) at start. `nil` when the directory exists.
        public var missingDirectory: String?
        /// What a start would read.
        public var file: ReadOutcome
    }

    /// Checks the directory as the start does (``prepare()``: the socket directory's rules, apart
    /// from the socket's by device and inode, a memory-backed file system unless ``onDisk``, and
    /// nothing but a regular file or a link at the path), creating nothing, and reads the file as the
    /// start would (``read()``). Throws what would stop the start; a file the start would refuse
    /// is ``ReadOutcome/refused(_:)`` in the result, since the start goes on cold.
    /// `maxTokens`: the most token lines a start decodes (`max_entries`).
    public func inspect(maxTokens: Int = .max) throws(Problem) -> Inspection {
        let walk: SocketPath.Walk
        do {
            walk = try SocketPath.inspectDirectory(directory, uid: uid, role: .cacheFile)
        } catch {
            throw Problem(description: "\(error)")
        }
        try checkApartFromSocket(walk.location)
        let type = try checkFileSystem(at: walk.resolved)
        if walk.missing == nil { try checkWhatIsThere() }
        return Inspection(
            fileSystem: Self.knownFileSystems[type] ?? "statfs type 0x\(String(type, radix: 16))",
            memoryBacked: type == Self.tmpfsMagic || type == Self.ramfsMagic,
            missingDirectory: walk.missing,
            file: walk.missing == nil ? read(maxTokens: maxTokens) : .absent
        )
    }
}
