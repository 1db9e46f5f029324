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

    /// The listener is bound to `listen`: the router is made.
    func bind(_ listen: MetadataListenAddress) {
        state.withLock { state in
            state.configuration.listen = listen
            state.router = MetadataRouter(configuration: state.configuration, tokens: state.tokens)
        }
    }

    /// What is served from the next request on.
    func reconfigure(defaultEntry: String, projectID: String?, tokens: any MetadataTokenSource) {
        state.withLock { state in
            state.configuration.defaultEntry = defaultEntry
            state.configuration.projectID = projectID
            state.tokens = tokens
            if state.router != nil {
                state.router = MetadataRouter(configuration: state.configuration, tokens: tokens)
            }
        }
    }
}
