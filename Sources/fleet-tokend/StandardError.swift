#if canImport(Glibc)
    import Glibc
    private let systemWrite = Glibc.write
#elseif canImport(Darwin)
    import Darwin
    private let systemWrite = Darwin.write
#endif

/// Messages to standard error that never end the process: with SIGPIPE ignored, a closed pipe
/// makes the write fail, and the failure is dropped.
enum StandardError {
    /// Writes `text`, or as much of it as standard error takes before a write fails.
    static func write(_ text: String) {
        Array(text.utf8).withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = systemWrite(STDERR_FILENO, bytes.baseAddress! + offset, bytes.count - offset)
                if written < 0, errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }
}
