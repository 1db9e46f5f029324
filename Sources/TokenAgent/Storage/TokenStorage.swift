/// Where the store keeps the servable tokens it hands over: the engine's only copy of each token
/// it takes, kept where every process on the host can read it (the shared-memory segments of
/// docs/SHM.md). The store tells it of every change under the shard's lock, so it is current
/// before the request that caused the change is answered.
///
/// The store keeps no copy of a token the storage took: it reads it back through
/// ``withToken(kind:id:hint:_:)`` under the same shard lock, so each token is held once. A token
/// the storage took is given back until the store stores another for the key or removes it,
/// whatever happens to its segments meanwhile (growth, rotation, a limit). Its calls must not
/// wait or take the store's locks.
public protocol TokenStorage: AnyObject, Sendable {
    /// `token` is now the servable token of (`kind`, `id`). Returns whether the storage holds it
    /// (then the store keeps no copy); `false` leaves the key out of the storage (no segment for
    /// the kind, or none could take the token) and the store keeps its own copy.
    /// - Parameters:
    ///   - expiry: its expiry on the agent's monotonic clock (`CLOCK_BOOTTIME`).
    ///   - lifetime: its lifetime as fetched, seconds.
    ///   - unixExpiry: its expiry as the token states it.
    func tokenStored(
        kind: String,
        id: String,
        token: String,
        expiry: MonotonicInstant,
        lifetime: Double,
        unixExpiry: UnixTime
    ) -> Bool

    /// (`kind`, `id`) has no servable token any more: dropped, evicted, refused, expired or forgotten.
    func tokenRemoved(kind: String, id: String)

    /// About `tokens` new tokens of `kind` come at once (a cache taken over at start), none with an
    /// id longer than `idLength` or a token longer than `tokenLength` bytes: the storage may make
    /// room for them all now, rather than grow one token at a time. Only a hint: each token is
    /// still handed over by ``tokenStored(kind:id:token:expiry:lifetime:unixExpiry:)``.
    func reserve(kind: String, tokens: Int, idLength: Int, tokenLength: Int)

    /// Calls `body` with the bytes of the token the storage holds for `kind` and the id whose UTF-8
    /// bytes are `id` (valid only during the call); returns whether it holds one (`false`: `body`
    /// was not called). Not generic: it is called through the protocol on every socket GET, and a
    /// generic call through an existential looks up its type metadata at run time.
    ///
    /// `hint` is the storage's own note of where it found the token last time (zero at first),
    /// which the store keeps with the entry and passes back: the storage may try that place first,
    /// and updates the note. It must never serve a token on a hint's word alone.
    func withToken(
        kind: String,
        id: UnsafeRawBufferPointer,
        hint: inout UInt64,
        _ body: (UnsafeRawBufferPointer) -> Void
    ) -> Bool

    /// The store has an entry's `hint` and will soon call ``withToken(kind:id:hint:_:)`` with it:
    /// the storage may start loading what the hint points to (never reading it: the hint may be
    /// stale). Called under the shard's lock; it must not block.
    func prefetch(hint: UInt64)
}

extension TokenStorage {
    /// No room made ahead: each token is placed as it comes.
    public func reserve(kind: String, tokens: Int, idLength: Int, tokenLength: Int) {}

    /// ``withToken(kind:id:hint:_:)`` without a hint.
    public func withToken(kind: String, id: UnsafeRawBufferPointer, _ body: (UnsafeRawBufferPointer) -> Void) -> Bool {
        var hint: UInt64 = 0
        return withToken(kind: kind, id: id, hint: &hint, body)
    }
}
