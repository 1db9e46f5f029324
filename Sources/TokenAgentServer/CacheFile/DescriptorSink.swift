import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// What a destination does with a snapshot that a ``DescriptorSink`` writes into its descriptor:
/// the cache file's temporary file, renamed over the file; systemd's fd store's memory file,
/// sealed and stored.
public protocol DescriptorPlacement {
    /// What a failed write (of the body, the header, or ``seal(_:_:)``) is reported as.
    func writeFailed(_ error: any Error) -> any Error
    /// Makes the whole snapshot in `fd`, still open, the destination's to keep: the cache file
    /// syncs it; the fd store seals it and stores it (none when `framing` holds no token).
    func seal(_ fd: Int32, _ framing: CacheSnapshot.Encoded) throws
    /// Puts the snapshot in place once its descriptor is closed (the cache file renames its
    /// temporary file over the file). On a failure it cleans up after itself.
    func place() throws
    /// Drops what a snapshot given up before ``seal(_:_:)`` ended leaves (the temporary file).
    func discard()
}

extension DescriptorPlacement {
    public func writeFailed(_ error: any Error) -> any Error { error }
    public func place() throws {}
    public func discard() {}
}

/// One snapshot written into an open descriptor, the one ``SnapshotSink`` of the cache file and
/// of systemd's fd store: the body from ``CacheSnapshot/headerBytes`` on, a piece at a time, then
/// the header at offset 0 (`pwrite`, again after a short write or EINTR), then the placement's
/// ``DescriptorPlacement/seal(_:_:)``, the descriptor closed and ``DescriptorPlacement/place()``.
/// A failure or ``abandon()`` closes the descriptor and discards what it held. It owns the
/// descriptor until then.
public final class DescriptorSink<Placement: DescriptorPlacement>: SnapshotSink {
    /// The descriptor, or -1 once closed.
    private var fd: Int32
    /// Whether there is no descriptor at all (the fd store without a service manager): every call
    /// does nothing, and the snapshot goes nowhere.
    private let nowhere: Bool
    private var offset = CacheSnapshot.headerBytes
    private let placement: Placement

    /// Writes into `fd` (`nil`: nowhere) for `placement`.
    public init(fd: Int32?, placement: Placement) {
        self.fd = fd ?? -1
        nowhere = fd == nil
        self.placement = placement
    }

    deinit { abandon() }

    public func append(_ bytes: UnsafeRawBufferPointer) throws {
        guard !nowhere else { return }
        do {
            try write(bytes)
        } catch {
            abandon()
            throw placement.writeFailed(error)
        }
    }

    public func commit(_ framing: CacheSnapshot.Encoded) throws {
        guard !nowhere else { return }
        precondition(framing.header.count == CacheSnapshot.headerBytes)
        do {
            try framing.body.withUnsafeBytes { try write($0) }
            try framing.header.withUnsafeBytes { try Self.write($0, to: fd, at: 0) }
            try placement.seal(fd, framing)
        } catch {
            abandon()
            throw placement.writeFailed(error)
        }
        close()
        try placement.place()
    }

    public func abandon() {
        if close() { placement.discard() }
    }

    /// Writes the body's next bytes.
    private func write(_ bytes: UnsafeRawBufferPointer) throws {
        try Self.write(bytes, to: fd, at: offset)
        offset += bytes.count
    }

    /// Closes the descriptor; `false` when it was not open.
    @discardableResult
    private func close() -> Bool {
        guard fd >= 0 else { return false }
        _ = Glibc.close(fd)
        fd = -1
        return true
    }

    private static func write(_ bytes: UnsafeRawBufferPointer, to fd: Int32, at offset: Int) throws {
        var written = 0
        while written < bytes.count {
            let count = pwrite(fd, bytes.baseAddress! + written, bytes.count - written, off_t(offset + written))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { throw CacheFile.Problem(description: "write: \(CacheFile.errorText())") }
            written += count
        }
    }
}
