/// fleet-tokend's version, the one place it is written: `fleet-tokend --version`, `STATS`
/// (`version=`), `status`, the start-up log line and the `fleet_tokend_build_info` gauge read it
/// here, and the .deb, the OCI image, the Kubernetes manifests' image tags and CHANGELOG.md's top
/// entry take it from this file (`scripts/check-manifests` and a test hold them equal).
public enum FleetTokendVersion {
    /// The version, `MAJOR.MINOR.PATCH`.
    public static let version = "0.1.0"
}
