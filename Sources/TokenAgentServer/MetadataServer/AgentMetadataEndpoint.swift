import Logging
import MetadataEndpoint
import TokenAgent

/// The agent's GCE metadata endpoint (`metadata_server`): the listener, serving the access-token
/// entries of the configuration in force from the engine (``EngineMetadataTokens``).
///
/// A reload (``apply(_:rules:)``) swaps the entries, their rules, the default entry and the
/// project; the address is bound once, at start (a changed `listen` waits for a restart, as
/// `fleet-tokend reload` says). A reload that removes `metadata_server` leaves the listener up
/// until the restart, serving no entry.
public final class AgentMetadataEndpoint: Sendable {
    /// The listener, a `Service` for the agent's group.
    public let server: MetadataHTTPServer
    private let engine: TokenEngine

    /// The endpoint `configuration` asks for, serving its entries under `rules` and calling
    /// `onListening` once it listens; `nil` when it asks for none. `configuration` is a validated
    /// one; its `request_timeout` replaces `limits`' own.
    public init?(
        configuration: AgentConfiguration,
        rules: AccessRules,
        engine: TokenEngine,
        logger: Logger,
        limits: MetadataHTTPServer.Limits = MetadataHTTPServer.Limits(),
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        guard let settings = try? configuration.metadataServerConfiguration(),
            let requestTimeout = configuration.metadataServer?.requestTimeout
        else { return nil }
        var limits = limits
        limits.requestTimeout = .nanoseconds(Int64((requestTimeout * 1e9).rounded()))
        self.engine = engine
        server = MetadataHTTPServer(
            configuration: settings,
            tokens: EngineMetadataTokens(entries: configuration.metadataEntries(rules: rules), engine: engine),
            logger: logger,
            limits: limits,
            onListening: onListening
        )
    }

    /// Serves `configuration`'s entries under `rules` from the next request on, with its default
    /// entry and project; with no `metadata_server` in it, no entry at all.
    public func apply(_ configuration: AgentConfiguration, rules: AccessRules) {
        guard let settings = configuration.metadataServer else {
            server.reconfigure(
                defaultEntry: "",
                projectID: nil,
                tokens: EngineMetadataTokens(entries: [], engine: engine)
            )
            return
        }
        server.reconfigure(
            defaultEntry: settings.defaultEntry,
            projectID: settings.projectID,
            tokens: EngineMetadataTokens(entries: configuration.metadataEntries(rules: rules), engine: engine)
        )
    }
}
