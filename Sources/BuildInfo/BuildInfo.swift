import TokenWire

/// What this build of fleet-tokend is: its version and the commit it was built from, for
/// `--version`, `STATS`, `status`, the start-up log line and the `fleet_tokend_build_info` gauge.
public enum BuildInfo {
    /// The version (``FleetTokendVersion/version``).
    public static let version = FleetTokendVersion.version
    /// The commit the build is from, 12 hex digits (with `-dirty` when tracked files differed from
    /// it), or `unknown` when built outside a git checkout.
    public static let commit = buildCommit
    /// `0.1.0 (commit 0123456789ab)`.
    public static var description: String { "\(version) (commit \(commit))" }
}
