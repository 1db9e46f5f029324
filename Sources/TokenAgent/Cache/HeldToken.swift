/// Where an entry's token is kept.
///
/// With a ``TokenStorage`` (the shared-memory segments) the token is kept once on the host: in the
/// storage, which every reader maps, and not in the entry as well. The entry keeps its own copy
/// only when the storage could not take the token (no segment for the kind, a limit stopped a
/// segment's growth, or the token is larger than the largest slot), and always without storage.
enum HeldToken: Equatable {
    /// No token: never fetched, refused, or dropped.
    case none
    /// The store's own copy.
    case owned(String)
    /// In the storage only: read back through ``TokenStorage/withToken(kind:id:hint:_:)``.
    case inStorage
    /// It can no longer be served, and the storage let its bytes go; the entry remembers that it
    /// held one (for health and `INFO`) by its fingerprint.
    case unservable(fingerprint: String)

    /// Whether the entry holds a token, servable or not.
    var isHeld: Bool { self != .none }
}

/// A cached token as the store hands it out, valid only during the call it is passed to: its
/// bytes (in the store's own copy or in shared memory, under the store's lock), its expiry, and
/// the store's own `String` when it keeps one.
public struct TokenView {
    /// The token's UTF-8 bytes; valid only during the call the view is passed to.
    public let bytes: UnsafeRawBufferPointer
    /// Its expiry, Unix seconds.
    public let expiresAt: Int64
    /// The store's own copy, when it keeps one (a retain, not a copy, makes a ``ServedToken``).
    let owned: String?

    /// The token as a ``ServedToken`` that outlives the call (a copy of the bytes unless the store
    /// keeps its own `String`).
    public var served: ServedToken {
        ServedToken(token: owned ?? String(decoding: bytes, as: UTF8.self), expiresAt: expiresAt)
    }
}
