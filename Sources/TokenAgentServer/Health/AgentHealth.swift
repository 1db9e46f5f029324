import TokenAgent
import TokenWire

/// Judges the agent's health from the engine's provider records, its cache survey and the
/// refresher's heartbeat, with the thresholds of ``HealthSettings``.
public struct AgentHealth: Sendable {
    /// The thresholds.
    public let settings: HealthSettings
    /// The refresher's heartbeat; `nil` when no refresher runs (then it never stalls).
    public let heartbeat: RefresherHeartbeat?

    /// A judge with `settings`, watching `heartbeat`.
    public init(settings: HealthSettings = HealthSettings(), heartbeat: RefresherHeartbeat? = nil) {
        self.settings = settings
        self.heartbeat = heartbeat
    }

    /// Whether the refresher has not completed a pass for longer than allowed. Cheap: PING asks.
    public var refresherStalled: Bool {
        guard let heartbeat else { return false }
        return heartbeat.secondsSinceLastBeat > settings.refresherStallAfter
    }

    /// The health of `engine` now, from `providers` and `survey` (read once by the caller so the
    /// metrics and the report agree).
    public func report(
        engine: TokenEngine,
        providers: [ProviderHealth],
        survey: [KindSurvey]
    ) -> HealthReport {
        var report = HealthReport()
        report.refresherStalled = refresherStalled
        let now = engine.now
        let forgetAfter = engine.policy.idleTimeout
        for provider in providers {
            if provider.needsOperator, provider.failingSince != nil {
                var detail = "needs the operator"
                if let last = provider.lastFailure { detail += " (\(last))" }
                report.problems.append(
                    HealthReport.Problem(kind: provider.kind, reason: .misconfigured, detail: detail)
                )
                continue
            }
            guard let failing = provider.failingFor(now: now, forgetAfter: forgetAfter),
                failing >= settings.degradedAfter
            else { continue }
            var detail = "provider failing for \(Int(saturating: failing)) s"
            if let last = provider.lastFailure { detail += " (\(last))" }
            report.problems.append(HealthReport.Problem(kind: provider.kind, reason: .providerFailing, detail: detail))
        }
        for kind in survey where kind.activeBelowMinimumValidity > 0 {
            let soonest = Int(saturating: (kind.soonestActiveExpiry ?? 0).rounded(.down))
            report.problems.append(
                HealthReport.Problem(
                    kind: kind.kind,
                    reason: .expirySoon,
                    detail: "\(kind.activeBelowMinimumValidity) tokens in use under their minimum validity, "
                        + "soonest expiry in \(soonest) s"
                )
            )
        }
        return report
    }
}
