import MetadataEndpoint
import Synchronization

/// The router in force: made once the listener's port is known (the `Host` check needs it), and
/// made again by each reconfiguration (a reload's default entry, project and entries).
final class RouterHolder: Sendable {
    private struct State {
        var configuration: MetadataServerConfiguration
        var tokens: any MetadataTokenSource
        var router: MetadataRouter?
    }

    private let state: Mutex<State>

    init(configuration: MetadataServerConfiguration, tokens: any MetadataTokenSource) {
        state = Mutex(State(configuration: configuration, tokens: tokens))
    }

    /// The router; `nil` for the instant between binding and making it.
    var router: MetadataRouter? { state.withLock { $0.router } }

    /// The entries in force now, the last reconfiguration's: a token that comes is checked
    /// against them (the router that asked for it may be an older one).
    var entries: [MetadataEntry] { state.withLock { $0.tokens }.entries }

    /// A router serving `tokens` under `configuration`, checking the tokens that come against the
    /// entries in force then.
    private func makeRouter(_ configuration: MetadataServerConfiguration, _ tokens: any MetadataTokenSource)
        -> MetadataRouter
    {
        MetadataRouter(
            configuration: configuration,
            tokens: tokens,
            entriesInForce: { [weak self] in self?.entries ?? [] }
        )
    }

    /// The listener is bound to `listen`: the router is made.
    func bind(_ listen: MetadataListenAddress) {
        state.withLock { state in
            state.configuration.listen = listen
            state.router = makeRouter(state.configuration, state.tokens)
        }
    }

    /// What is served from the next request on.
    func reconfigure(defaultEntry: String, projectID: String?, tokens: any MetadataTokenSource) {
        state.withLock { state in
            state.configuration.defaultEntry = defaultEntry
            state.configuration.projectID = projectID
            state.tokens = tokens
            if state.router != nil { state.router = makeRouter(state.configuration, tokens) }
        }
    }
}
