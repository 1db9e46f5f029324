import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Where the tests put their files: one directory for the whole run, so nothing a test makes is
/// left in `/tmp` when the run ends.
///
/// `scripts/test` makes that directory (`/tmp/ftd-suite.XXXXXX`), names it in
/// `$FLEET_TOKEND_TEST_TMP` (and `$TMPDIR`, for the tests that ask the system for a temporary
/// directory) and removes it when the run ends, whatever became of the tests. A test run without
/// it (`swift test` alone) makes a directory of its own, `/tmp/ftd-run-<pid>`, removed when the
/// test process exits. Paths stay short: a Unix socket's path must fit in 108 bytes.
public enum TestTemporary {
    /// The run's directory, mode 0755 (others' test users reach sockets in it).
    public static let root: String = {
        if let given = getenv("FLEET_TOKEND_TEST_TMP").map({ String(cString: $0) }), !given.isEmpty {
            return given
        }
        let path = "/tmp/ftd-run-\(getpid())"
        mkdir(path, 0o755)
        chmod(path, 0o755)
        atexit { try? FileManager.default.removeItem(atPath: "/tmp/ftd-run-\(getpid())") }
        return path
    }()

    /// A new path in the run's directory: `prefix`, eight random hex digits, `suffix`. Nothing
    /// is created.
    public static func path(_ prefix: String, suffix: String = "") -> String {
        let random = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        return "\(root)/\(prefix)-\(String(repeating: "0", count: 8 - random.count))\(random)\(suffix)"
    }

    /// A new directory in the run's directory, mode 0755, made now.
    public static func directory(_ prefix: String) throws -> String {
        for _ in 0..<8 {
            let path = path(prefix)
            if mkdir(path, 0o755) == 0 {
                chmod(path, 0o755)
                return path
            }
            guard errno == EEXIST else { break }
        }
        throw TemporaryDirectoryError(errno: errno)
    }

    /// Removes `path` and everything in it; a missing path is no error.
    public static func remove(_ path: String) {
        guard path.hasPrefix(root + "/") else { return }
        try? FileManager.default.removeItem(atPath: path)
    }

    /// Why a temporary directory could not be made.
    public struct TemporaryDirectoryError: Error, CustomStringConvertible {
        /// The last `mkdir`'s errno.
        public var errno: Int32
        /// `cannot make a test directory: <strerror>`.
        public var description: String { "cannot make a test directory: \(String(cString: strerror(errno)))" }
    }
}
