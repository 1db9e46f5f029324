/// Something that keeps a copy of the servable tokens, told of every change by the store under
/// the shard's lock, so it is current before the request that caused the change is answered
/// (the shared-memory segments of docs/SHM.md). Its calls must not wait or take the store's locks.
public protocol TokenMirror: Sendable {
    /// `token` is now the servable token of (`kind`, `id`).
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
    )

    /// (`kind`, `id`) has no servable token any more: dropped, evicted, refused, expired or forgotten.
    func tokenRemoved(kind: String, id: String)
}
