import Foundation

/// Messages to standard error that never end the process: with SIGPIPE ignored, a closed pipe
/// makes the write fail, and the failure is dropped (`FileHandle.write(_:)` would trap on it).
enum StandardError {
    /// Writes `text`, or nothing when standard error cannot take it.
    static func write(_ text: String) {
        try? FileHandle.standardError.write(contentsOf: Data(text.utf8))
    }
}
