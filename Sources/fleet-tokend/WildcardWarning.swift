import Logging
import TokenAgent

/// The warning a kind with `accept_wildcard` earns at start and at every reload: its tokens may
/// act for every id of the kind, so any process allowed one id may be handed such a token.
enum WildcardWarning {
    static func log(_ configuration: AgentConfiguration, logger: Logger) {
        for kind in configuration.wildcardKinds {
            logger.warning(
                "kind accepts wildcard tokens (accept_wildcard): a token served for one id may act for every id of the kind",
                metadata: ["token_kind": "\(kind)"]
            )
        }
    }
}
