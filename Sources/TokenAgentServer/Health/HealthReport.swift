/// The agent's health at one moment: serving, or degraded and why.
public struct HealthReport: Sendable, Hashable {
    /// Why a kind makes the agent degraded.
    public enum Reason: String, Sendable, Hashable, CaseIterable {
        /// The kind's provider has failed for longer than `degraded_after`.
        case providerFailing = "provider_failing"
        /// The kind's signer or credentials need the operator (a permission, an account, refused
        /// credentials): degraded from the first such failure.
        case misconfigured
        /// A token of the kind read within the idle time-out has less time left than a default GET
        /// requires (the refresh is late).
        case expirySoon = "expiry_soon"
    }

    /// One thing wrong with one kind.
    public struct Problem: Sendable, Hashable {
        /// The kind.
        public var kind: String
        /// What is wrong.
        public var reason: Reason
        /// The details, for humans: how long, the last error (never a secret).
        public var detail: String
    }

    /// What is wrong, by kind; empty when nothing is.
    public var problems: [Problem] = []
    /// Whether the background refresher has stalled.
    public var refresherStalled = false

    /// Whether the agent is degraded.
    public var isDegraded: Bool { refresherStalled || !problems.isEmpty }

    /// `serving` or `degraded`.
    public var state: String { isDegraded ? "degraded" : "serving" }

    /// One line naming each problem, e.g. `vehicle: provider failing for 130 s (provider failed:
    /// HTTP 503)`; empty when serving.
    public var summary: String {
        var parts: [String] = []
        if refresherStalled { parts.append("refresher stalled") }
        for problem in problems { parts.append("\(problem.kind): \(problem.detail)") }
        return parts.joined(separator: "; ")
    }
}
