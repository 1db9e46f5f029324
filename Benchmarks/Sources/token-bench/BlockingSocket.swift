import Foundation
import TokenWire

#if canImport(Glibc)
    import Glibc
#endif

/// A blocking Unix-socket connection for request-reply loops with one request outstanding: the
/// same code measures the agent and Redis.
final class BlockingSocket {
    private let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 64 * 1024)

    init(path: String) throws {
        fd = UnixSocketAddress.connectStream(to: path)
        guard fd >= 0 else { throw BenchError("connect \(path): \(String(cString: strerror(-fd)))") }
    }

    deinit { close(fd) }

    /// Writes `bytes` and reads nothing (requests whose replies are never read: a flood).
    func send(_ bytes: [UInt8]) throws {
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw BenchError("short write") }
    }

    /// Writes `request` and reads until `complete` says the reply is whole; returns its length.
    @discardableResult
    func roundTrip(_ request: [UInt8], complete: (UnsafeRawBufferPointer) -> Bool) throws -> Int {
        let written = request.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == request.count else { throw BenchError("short write") }
        var filled = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + filled, $0.count - filled) }
            guard count > 0 else { throw BenchError("read failed") }
            filled += count
            let done = buffer.withUnsafeBytes { complete(UnsafeRawBufferPointer(rebasing: $0[0..<filled])) }
            if done { return filled }
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
