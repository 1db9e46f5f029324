import CSystemd

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A sealed anonymous memory file (`memfd`): bytes that live only in memory, cannot change once
/// sealed, and can be handed to the service manager's file-descriptor store.
public enum SealedMemoryFile {
    /// Why a memory file could not be made or read.
    public struct Failure: Error, CustomStringConvertible {
        /// What failed.
        public var description: String
    }

    /// Writes `bytes` into a new memory file named `name`, seals it, and returns its descriptor
    /// (the caller closes it).
    public static func create(name: String, bytes: [UInt8]) throws -> Int32 {
        try create(name: name, parts: [bytes])
    }

    /// Writes `parts`, one after the other, into a new memory file named `name`, seals it, and
    /// returns its descriptor (the caller closes it): a header and a large body need not be
    /// copied into one array first.
    public static func create(name: String, parts: [[UInt8]]) throws -> Int32 {
        let fd = try createUnsealed(name: name)
        for bytes in parts {
            var written = 0
            while written < bytes.count {
                let n = bytes[written...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                if n < 0, errno == EINTR { continue }
                guard n > 0 else {
                    close(fd)
                    throw Failure(description: "write: \(String(cString: strerror(errno)))")
                }
                written += n
            }
        }
        do {
            try seal(fd)
        } catch {
            close(fd)
            throw error
        }
        return fd
    }

    /// A new memory file named `name`, not sealed yet: the caller writes it, then ``seal(_:)``s
    /// it (and closes it).
    public static func createUnsealed(name: String) throws -> Int32 {
        let fd = csystemd_memfd_create(name)
        guard fd >= 0 else { throw Failure(description: "memfd_create: \(String(cString: strerror(errno)))") }
        return fd
    }

    /// Seals the memory file `fd` against writes, growth and shrinking.
    public static func seal(_ fd: Int32) throws {
        guard csystemd_seal(fd) == 0 else {
            throw Failure(description: "sealing: \(String(cString: strerror(errno)))")
        }
    }

    /// Whether `fd` is a memory file sealed against writes.
    public static func isSealed(_ fd: Int32) -> Bool {
        csystemd_is_write_sealed(fd) != 0
    }

    /// Reads the whole file at `fd` from its start (at most `limit` bytes).
    public static func read(_ fd: Int32, limit: Int = 256 * 1024 * 1024) throws -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var offset: off_t = 0
        while bytes.count < limit {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            if n == 0 { break }
            guard n > 0 else { throw Failure(description: "read: \(String(cString: strerror(errno)))") }
            bytes += chunk[0..<n]
            offset += off_t(n)
        }
        return bytes
    }
}
