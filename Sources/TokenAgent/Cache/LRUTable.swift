/// A hash table that remembers use order, for a least-recently-used bound.
///
/// Entries live in one flat array of slots linked into a use-ordered list by index, so the layout
/// stays a plain array (easy to scan, and to mirror into a shared segment later). Every operation
/// is O(1) except ``forEachKey(_:)``.
public struct LRUTable<Key: Hashable, Value> {
    fileprivate struct Slot {
        var key: Key
        var value: Value
        var newer: Int  // towards the most recently used end; -1 at the end
        var older: Int  // towards the least recently used end; -1 at the end
    }

    private var slots: [Slot?] = []
    private var free: [Int] = []
    private var index: [Key: Int] = [:]
    private var newest = -1
    private var oldest = -1

    /// Creates an empty table.
    public init() {}

    /// The number of entries.
    public var count: Int { index.count }

    /// The value for `key`, without changing the use order.
    public func peek(_ key: Key) -> Value? {
        guard let slot = index[key] else { return nil }
        return slots[slot]!.value
    }

    /// Changes the value for `key` in place and marks it most recently used; returns `nil` when absent.
    @discardableResult
    public mutating func update<R>(_ key: Key, touch: Bool = true, _ body: (inout Value) -> R) -> R? {
        guard let slot = index[key] else { return nil }
        if touch { moveToNewest(slot) }
        return body(&slots[slot]!.value)
    }

    /// Inserts or replaces the value for `key`, marks it most recently used, and returns the least
    /// recently used entry that was evicted to stay within `capacity`, if any.
    @discardableResult
    public mutating func set(_ key: Key, _ value: Value, capacity: Int) -> (key: Key, value: Value)? {
        if let slot = index[key] {
            slots[slot]!.value = value
            moveToNewest(slot)
            return nil
        }
        var evicted: (key: Key, value: Value)?
        if index.count >= capacity, oldest >= 0 {
            let victim = slots[oldest]!
            remove(victim.key)
            evicted = (victim.key, victim.value)
        }
        let slot: Int
        if let reused = free.popLast() {
            slot = reused
        } else {
            slot = slots.count
            slots.append(nil)
        }
        slots[slot] = Slot(key: key, value: value, newer: -1, older: newest)
        if newest >= 0 { slots[newest]!.newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
        index[key] = slot
        return evicted
    }

    /// Removes `key` and returns its value.
    @discardableResult
    public mutating func remove(_ key: Key) -> Value? {
        guard let slot = index.removeValue(forKey: key) else { return nil }
        unlink(slot)
        let value = slots[slot]!.value
        slots[slot] = nil
        free.append(slot)
        return value
    }

    /// The slot holding `key`, if any: a position that stays the key's until it is removed.
    public func slot(of key: Key) -> Int? { index[key] }

    /// The key and value in `slot`, if the slot is in use.
    public func entry(inSlot slot: Int) -> (key: Key, value: Value)? {
        guard slot >= 0, slot < slots.count, let entry = slots[slot] else { return nil }
        return (entry.key, entry.value)
    }

    /// Changes the value in `slot` in place, without changing the use order; `nil` when the slot
    /// is not in use.
    @discardableResult
    public mutating func update<R>(slot: Int, touch: Bool = false, _ body: (inout Value) -> R) -> R? {
        guard slot >= 0, slot < slots.count, slots[slot] != nil else { return nil }
        if touch { moveToNewest(slot) }
        return body(&slots[slot]!.value)
    }

    /// The slots in use, most recently used first.
    public var slotsNewestFirst: [Int] {
        var result: [Int] = []
        result.reserveCapacity(count)
        var slot = newest
        while slot >= 0 {
            result.append(slot)
            slot = slots[slot]!.older
        }
        return result
    }

    /// Calls `body` with every key, most recently used first.
    public func forEachKey(_ body: (Key, Value) -> Void) {
        var slot = newest
        while slot >= 0 {
            let entry = slots[slot]!
            body(entry.key, entry.value)
            slot = entry.older
        }
    }

    /// The keys from least to most recently used (for tests and diagnostics).
    public var keysOldestFirst: [Key] {
        var keys: [Key] = []
        var slot = oldest
        while slot >= 0 {
            keys.append(slots[slot]!.key)
            slot = slots[slot]!.newer
        }
        return keys
    }

    private mutating func unlink(_ slot: Int) {
        let entry = slots[slot]!
        if entry.newer >= 0 { slots[entry.newer]!.older = entry.older } else { newest = entry.older }
        if entry.older >= 0 { slots[entry.older]!.newer = entry.newer } else { oldest = entry.newer }
    }

    private mutating func moveToNewest(_ slot: Int) {
        guard slot != newest else { return }
        unlink(slot)
        slots[slot]!.older = newest
        slots[slot]!.newer = -1
        if newest >= 0 { slots[newest]!.newer = slot }
        newest = slot
        if oldest < 0 { oldest = slot }
    }
}

extension LRUTable: Sendable where Key: Sendable, Value: Sendable {}
extension LRUTable.Slot: Sendable where Key: Sendable, Value: Sendable {}
