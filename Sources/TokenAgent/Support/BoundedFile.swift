import Glibc

/// Reads the small files the agent is given (its config file, credentials, keys, header files)
/// with a bound set before any byte is read: only a regular file (opened with `O_NONBLOCK`, so a
/// FIFO cannot hang the start, and checked with `fstat` on the descriptor read), and at most
/// `limit` bytes (the read stops at `limit + 1`, since `stat` says 0 for a file of `/proc`). A
/// refusal names the file and its limit.
enum BoundedFile {
    /// The largest credentials file (`$GOOGLE_APPLICATION_CREDENTIALS` and the like).
    static let credentialsLimit = 1024 * 1024
    /// The largest service-account key file (`issuer_key`, `issuers.*.key_file`); Google's are
    /// about 2.4 KB.
    static let keyLimit = 64 * 1024
    /// The largest headers file (`providers.*.headers_file`).
    static let headersLimit = 64 * 1024
    /// The largest config file.
    static let configLimit = 1024 * 1024

    /// What the limits are, for messages: `1 MiB`, `64 KiB`, `100 bytes`.
    static func describe(limit: Int) -> String {
        if limit >= 1024 * 1024, limit % (1024 * 1024) == 0 { return "\(limit / (1024 * 1024)) MiB" }
        if limit >= 1024, limit % 1024 == 0 { return "\(limit / 1024) KiB" }
        return "\(limit) bytes"
    }

    /// The contents of the regular file at `path`, at most `limit` bytes; throws what was wrong,
    /// naming `path` (and the limit, for a file over it).
    static func read(_ path: String, limit: Int) throws(BoundedFileError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)
        guard fd >= 0 else {
            throw BoundedFileError(path: path, problem: .unreadable(missing: errno == ENOENT))
        }
        defer { close(fd) }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            throw BoundedFileError(path: path, problem: .unreadable(missing: false))
        }
        guard status.st_mode & mode_t(S_IFMT) == mode_t(S_IFREG) else {
            throw BoundedFileError(path: path, problem: .notRegular)
        }
        let over = BoundedFileError(path: path, problem: .overLimit(limit))
        guard Int(status.st_size) <= limit else { throw over }
        // The size is a hint only: read to the end, but never past one byte more than the limit.
        var bytes = [UInt8](repeating: 0, count: min(max(Int(status.st_size), 4096), limit) + 1)
        var count = 0
        while true {
            if count == bytes.count {
                guard bytes.count <= limit else { throw over }
                bytes.append(contentsOf: repeatElement(0, count: min(bytes.count, limit + 1 - bytes.count)))
            }
            let got = bytes.withUnsafeMutableBytes { buffer in
                Glibc.read(fd, buffer.baseAddress! + count, buffer.count - count)
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw BoundedFileError(path: path, problem: .unreadable(missing: false))
            }
            if got == 0 { break }
            count += got
        }
        guard count <= limit else { throw over }
        return Array(bytes[..<count])
    }
}

/// Why ``BoundedFile/read(_:limit:)`` refused a file; ``description`` names it (never its contents).
struct BoundedFileError: Error, Equatable, CustomStringConvertible {
    /// What was wrong.
    enum Problem: Equatable {
        /// It could not be opened or read (`missing`: there is no such file).
        case unreadable(missing: Bool)
        /// It is a directory, a FIFO, a device or a socket.
        case notRegular
        /// It is over its limit, bytes.
        case overLimit(Int)
    }

    /// The file.
    var path: String
    /// What was wrong.
    var problem: Problem

    /// `cannot read <path>`, `<path> is not a regular file`, `<path> is over its limit of 1 MiB`.
    var description: String {
        switch problem {
        case .unreadable: "cannot read \(path)"
        case .notRegular: "\(path) is not a regular file"
        case .overLimit(let limit): "\(path) is over its limit of \(BoundedFile.describe(limit: limit))"
        }
    }
}
