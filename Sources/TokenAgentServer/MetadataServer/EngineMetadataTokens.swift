import MetadataEndpoint
import TokenAgent
import TokenWire

/// The metadata endpoint's token source: a fixed set of entries (a configuration's, with the
/// rules it resolved; a reload makes a new source) and the engine's cache.
///
/// A token is the engine's answer to `GET access <name>`: the cached token while it has the
/// serving floor left (300 s for access tokens), else the one fetch in flight for the entry,
/// shared with every socket, shared-memory and metadata caller: one `generateAccessToken` per
/// entry per lifetime however many ask, wherever they ask.
public struct EngineMetadataTokens: MetadataTokenSource {
    public let entries: [MetadataEntry]
    private let engine: TokenEngine

    /// `entries`' tokens from `engine`.
    public init(entries: [MetadataEntry], engine: TokenEngine) {
        self.entries = entries
        self.engine = engine
    }

    /// The failure of a fetch, as the engine tells it (logged, never sent).
    struct Unavailable: Error, CustomStringConvertible {
        let failure: EngineFailure
        var description: String { failure.description }
    }

    public func token(for entry: MetadataEntry) async throws -> MetadataToken {
        switch await engine.get(kind: AccessTokenKind.kind(name: entry.name), id: entry.name) {
        case .success(let served):
            return MetadataToken(accessToken: served.token, expiresAt: Double(served.expiresAt))
        case .failure(let failure):
            throw Unavailable(failure: failure)
        }
    }
}
