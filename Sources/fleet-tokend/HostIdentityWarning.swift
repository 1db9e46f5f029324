import Logging
import TokenAgent

/// The warning an access token of the host's own identity (`"source": "host"`) earns at start and
/// at every reload: the host's identity holds Token Creator on every signing account, so whoever
/// has its token can mint any of their tokens at IAM, past every kind's rules and budget.
enum HostIdentityWarning {
    static func log(_ configuration: AgentConfiguration, logger: Logger) {
        let accounts = configuration.hostSigningAccounts
        for name in configuration.hostIdentityEntries {
            logger.warning(
                "access token serves the host's own identity: whoever may have it can act at IAM as every account the host signs for, past every kind's rules and budget",
                metadata: [
                    "access_token": "\(name)",
                    "signs_for": "\(accounts.isEmpty ? "-" : accounts.joined(separator: ","))",
                ]
            )
        }
    }
}
