extension String {
    /// Whether `self` and `other` are the same string value: their 16 bytes alike, which for a
    /// string of up to 15 UTF-8 bytes is its content and for a longer one its storage. A few
    /// instructions; `false` says nothing (use `==`). The hit path compares a kind name taken
    /// from the engine's own list with that list, where this is almost always `true`.
    @inlinable
    public func isSameValue(as other: String) -> Bool {
        withUnsafeBytes(of: self) { left in
            withUnsafeBytes(of: other) { right in
                left.load(as: (UInt64, UInt64).self) == right.load(as: (UInt64, UInt64).self)
            }
        }
    }

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
