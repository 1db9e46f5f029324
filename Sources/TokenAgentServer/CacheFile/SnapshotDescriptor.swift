import TokenAgent

#if canImport(Glibc)
    import Glibc
#endif

/// A snapshot written into an open descriptor, as a ``SnapshotSink`` writes it: the body from
/// ``CacheSnapshot/headerBytes`` on, a piece at a time, then the header at offset 0 (`pwrite`,
/// again after a short write or EINTR). It owns the descriptor until ``close()``.
public struct SnapshotDescriptor {
    /// The descriptor, or -1 once closed (or when there was none).
    public private(set) var fd: Int32
    private var offset = CacheSnapshot.headerBytes

    /// Writes into `fd` (-1: nowhere, a descriptor closed already).
    public init(_ fd: Int32) { self.fd = fd }

    /// Whether the descriptor is open.
    public var isOpen: Bool { fd >= 0 }

    /// Writes the body's next bytes.
    public mutating func append(_ bytes: UnsafeRawBufferPointer) throws {
        try Self.write(bytes, to: fd, at: offset)
        offset += bytes.count
    }

    /// Writes `framing`'s last piece of body, then its header at the start.
    public mutating func finish(_ framing: CacheSnapshot.Encoded) throws {
        precondition(framing.header.count == CacheSnapshot.headerBytes)
        try framing.body.withUnsafeBytes { try append($0) }
        try framing.header.withUnsafeBytes { try Self.write($0, to: fd, at: 0) }
    }

    /// Closes the descriptor; `false` when it was not open.
    @discardableResult
    public mutating func close() -> Bool {
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
