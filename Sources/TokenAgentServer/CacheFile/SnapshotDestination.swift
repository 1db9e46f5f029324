import TokenAgent

/// Where cache snapshots go: the cache file, or systemd's file-descriptor store.
///
/// A snapshot goes in a piece at a time (``SnapshotSink``), so a pass never holds tens of
/// megabytes of body in memory: ``begin()`` starts a new one beside the snapshot the destination
/// holds, the body follows in order, and ``SnapshotSink/commit(_:)`` puts the header first and
/// the new snapshot in the old one's place.
public protocol SnapshotDestination: Sendable {
    /// Its name in logs and metrics (`file`, `fd_store`).
    var name: String { get }
    /// What it is, and so which tokens it may hold: ``TokenCacheMedium/disk`` (the cache file)
    /// never holds the tokens of a kind that keeps them in memory (access tokens),
    /// ``TokenCacheMedium/memory`` (systemd's fd store) holds every kind's.
    var medium: TokenCacheMedium { get }
    /// Starts a new snapshot. Throws when it cannot; what the destination held stays.
    func begin() throws -> any SnapshotSink
}

/// One snapshot on its way into a ``SnapshotDestination``, used from one thread: the body's
/// pieces in order, then ``commit(_:)`` or ``abandon()``. Until the commit ends, the destination
/// holds what it held before.
public protocol SnapshotSink: AnyObject {
    /// Adds the body's next bytes.
    func append(_ bytes: UnsafeRawBufferPointer) throws
    /// Puts `framing`'s header before the body appended (``CacheSnapshot/headerBytes`` were left
    /// for it) and `framing`'s last piece of body after it, then makes the snapshot the
    /// destination's. On a failure what it held before stays, and the new one is dropped.
    func commit(_ framing: CacheSnapshot.Encoded) throws
    /// Drops the snapshot; what the destination held stays.
    func abandon()
}

extension SnapshotDestination {
    /// Puts `snapshot`, whole in memory, in the place of the one it held (tests, small snapshots).
    public func write(_ snapshot: CacheSnapshot.Encoded) throws {
        let sink = try begin()
        do {
            try sink.commit(snapshot)
        } catch {
            sink.abandon()
            throw error
        }
    }
}
