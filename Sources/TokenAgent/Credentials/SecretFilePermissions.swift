import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Warns when a file holding a secret (a service-account key, a credentials file) can be read by
/// its group or by others, as sshd and gcloud do: once per file and mode in the process, so a
/// reload does not repeat it, and again when the mode changes.
public enum SecretFilePermissions {
    /// The files (path and mode) already warned about.
    private static let warned = Mutex<Set<String>>([])

    /// The permission bits of `path` when its group or others may read it; `nil` when neither may,
    /// or it cannot be checked.
    public static func exposedMode(of path: String) -> mode_t? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        let mode = info.st_mode & 0o7777
        return mode & 0o044 != 0 ? mode : nil
    }

    /// Logs a warning naming `path` (`what` says which file it is) and its mode when its group or
    /// others may read it; at most once per path and mode.
    public static func warnIfReadableByOthers(_ path: String, what: String, logger: Logger) {
        guard let mode = exposedMode(of: path) else { return }
        let octal = "0" + String(mode, radix: 8)
        guard warned.withLock({ $0.insert("\(mode) \(path)").inserted }) else { return }
        logger.warning(
            "secret file readable by group or others",
            metadata: [
                "file": "\(path)", "mode": "\(octal)", "what": "\(what)",
                "fix": "chmod 600 (or 640 with a group only the agent is in)",
            ]
        )
    }
}
