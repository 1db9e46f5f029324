import Logging
import Synchronization

/// Whether the agent runs its demo issuer, as the configuration in force says (set at start and
/// by every reload): `STATS` (`demo=1`), the `fleet_tokend_demo_issuer` gauge, `status` and `ping`
/// report it, so a demo agent is never mistaken for one Fleet Engine accepts tokens from.
public final class IssuerMode: Sendable {
    private let demo = Atomic<Bool>(false)

    /// The demo issuer off until ``set(demo:logger:)`` says otherwise.
    public init() {}

    /// Whether the demo issuer runs.
    public var isDemo: Bool { demo.load(ordering: .relaxed) }

    /// Records the configuration in force, and when it runs the demo issuer says so in the log
    /// (the journal under systemd), at start and at every reload.
    public func set(demo: Bool, logger: Logger) {
        self.demo.store(demo, ordering: .relaxed)
        if demo {
            logger.warning(
                "DEMO ISSUER: tokens are signed with a throw-away RSA key made at start-up; they are for trying the agent only and Fleet Engine will reject them. Configure a provider or an issuer for real tokens (docs/CONFIG.md)."
            )
        }
    }
}
