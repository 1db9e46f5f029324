/// The hand-over of the engine's tokens to the next process, and their take-over by it: through
/// systemd's file-descriptor store (``TokenCacheMedium/memory``) or the cache file
/// (``TokenCacheMedium/disk``), which never holds the tokens of a kind that keeps them in memory.
extension TokenEngine {
    /// The tokens that can still be served, for handing over to the next process through
    /// `medium`: to ``TokenCacheMedium/disk``, never those of a kind whose tokens stay in memory
    /// (``TokenProvider/tokensStayInMemory``: access tokens).
    public func exportTokens(to medium: TokenCacheMedium) -> [CachedToken] {
        var tokens: [CachedToken] = []
        exportTokens(to: medium) { tokens += $0 }
        return tokens
    }

    /// The slots one chunk of ``exportTokens(to:chunkSize:_:)`` copies under a shard's lock.
    public static let exportChunk = 32

    /// Calls `body` with the tokens that can still be served, for `medium` as
    /// ``exportTokens(to:)`` chooses them, in chunks of at most `chunkSize` of a shard's slots,
    /// each copied out under that shard's lock and handed over after the lock is let go: a
    /// snapshot of the whole cache delays a request by one chunk's copy at most.
    public func exportTokens(
        to medium: TokenCacheMedium,
        chunkSize: Int = TokenEngine.exportChunk,
        _ body: ([CachedToken]) -> Void
    ) {
        store.forEachServableChunk(now: clock.now, chunkSize: max(1, chunkSize), medium: medium, body)
    }

    /// Appends the tokens that can still be served, for `medium` as ``exportTokens(to:)`` chooses
    /// them, to `builder`, each encoded straight from where the store holds it (no `String` per
    /// token), under its shard's lock a chunk of at most `chunkSize` slots at a time, and each
    /// chunk checksummed once the lock is let go (``CacheSnapshot/Builder/checksumAppended()``).
    /// Room for a chunk is made before the lock is taken, so the body never grows under it.
    /// `afterChunk` runs after each chunk, outside the lock, with the builder (where a writer
    /// drains it and a periodic pass rests); once it returns `false`, the export stops there and
    /// returns `false`.
    @discardableResult
    public func exportTokens(
        to medium: TokenCacheMedium,
        into builder: inout CacheSnapshot.Builder,
        chunkSize: Int = TokenEngine.exportChunk,
        afterChunk: (inout CacheSnapshot.Builder) -> Bool = { _ in true }
    ) -> Bool {
        let chunkSize = max(1, chunkSize)
        var goOn = true
        return store.forEachServable(now: clock.now, chunkSize: chunkSize, medium: medium, goOn: { goOn }) { step in
            switch step {
            case .chunkStarts:
                builder.makeRoom(forTokens: chunkSize)
            case .token(let kind, let id, let view):
                builder.append(kind: kind, id: id, expiresAt: view.expiresAt, token: view.bytes)
            case .chunkEnds:
                builder.checksumAppended()
                goOn = afterChunk(&builder)
            }
        }
    }

    /// Takes over tokens an earlier process held, read from `medium`: those of configured kinds
    /// that can still be served are cached as if fetched now; from ``TokenCacheMedium/disk``,
    /// never those of a kind whose tokens stay in memory. Returns how many were taken.
    @discardableResult
    public func importTokens(_ tokens: [CachedToken], from medium: TokenCacheMedium) -> Int {
        var tokens = tokens
        if medium == .disk {
            let runtime = fetches.runtime
            tokens.removeAll { !runtime.keeps($0.kind, on: .disk) }
        }
        return store.take(tokens, now: clock.now, unixNow: clock.unixNow)
    }

    /// Whether `kind`'s tokens stay in memory, never written to disk
    /// (``TokenProvider/tokensStayInMemory``); `false` for a kind not configured.
    public func tokensStayInMemory(kind: String) -> Bool {
        !fetches.runtime.keeps(kind, on: .disk)
    }
}
