/// Where the engine's tokens go at a restart, or come back from: what decides whether the tokens
/// of a kind that keeps them in memory (``TokenProvider/tokensStayInMemory``: access tokens, far
/// bigger secrets than a per-vehicle JWT) are in. ``TokenEngine/exportTokens(to:)`` and
/// ``TokenEngine/importTokens(_:from:)`` take one, with no default, so code that keeps tokens
/// across a restart has to say where.
public enum TokenCacheMedium: Sendable, Hashable {
    /// systemd's file-descriptor store: a sealed memory file handed to the next process, never on
    /// disk. Every kind's tokens.
    case memory
    /// A file on disk (a warm-restart cache file): the tokens of kinds that keep them in memory
    /// are never written to it, and never taken from it.
    case disk
}
