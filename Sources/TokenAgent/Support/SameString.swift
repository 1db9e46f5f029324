import TokenWire

extension String {
    /// `==`, trying ``isSameValue(as:)`` and the UTF-8 lengths first.
    @inlinable
    public func equalsQuickly(_ other: String) -> Bool {
        isSameValue(as: other) || (utf8.count == other.utf8.count && self == other)
    }
}

extension Collection {
    /// The first element whose name is `kind`, among a few (the configured kinds): the names are
    /// scanned for the same value first, which a kind taken from the engine's own list almost
    /// always is, and only then compared with `==`. On the hit path this costs less than hashing
    /// the name.
    @inlinable @inline(__always)
    public func first(named kind: String, by name: (Element) -> String) -> Element? {
        for element in self where name(element).isSameValue(as: kind) { return element }
        for element in self where name(element).equalsQuickly(kind) { return element }
        return nil
    }
}
