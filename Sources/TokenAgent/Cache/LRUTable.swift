import TokenSegment

/// A key of an ``LRUTable``: hashable, with the hash the table indexes it by (its `hashValue`
/// unless it says otherwise).
public protocol LRUTableKey: Hashable {
    /// The hash the table indexes the key by; equal keys have equal hashes.
    var tableHash: Int { get }
}

extension LRUTableKey {
    public var tableHash: Int { hashValue }
}

extension String: LRUTableKey {}
extension Int: LRUTableKey {}

/// A hash table that remembers use order, for a least-recently-used bound.
///
/// Entries live in flat arrays indexed by slot number, linked into a use-ordered list by index,
/// so the layout stays plain arrays (easy to scan, and to mirror into a shared segment later).
/// Keys, values and each slot's links are three arrays side by side: a relink reads 12 bytes of
/// links and never copies a key or a value. The index from key to
/// slot is its own open-addressing table (linear probing, backward-shift deletion) of 8-byte
/// buckets, each holding its key's hash beside the slot number: a probe passes other keys'
/// buckets without reading their slots, and a hit goes from its bucket straight to its key,
/// starting to load its value and links meanwhile (in a table larger than the caches each of
/// those reads is a cache miss; started together, they wait once). Every operation is O(1).
///
/// Each entry belongs to a group (a small number the caller picks; the store uses one per kind),
/// and use order is kept per group: the least recently used entry of any group is at hand, and
/// the number of entries of each.
public struct LRUTable<Key: LRUTableKey, Value> {
    /// A slot's place in its group's use order. (Its key's hash is kept in the slot's bucket.)
    fileprivate struct Links {
        var newer: Int32  // towards the most recently used end of its group; -1 at the end
        var older: Int32  // towards the least recently used end of its group; -1 at the end
        var group: Int32
    }

    /// Each slot's key, value and bookkeeping; `nil` key and value in a free slot.
    private var keys: [Key?] = []
    private var values: [Value?] = []
    private var links: [Links] = []
    private var free: [Int32] = []
    /// The index, a power of two long and at most three quarters full: each bucket is zero when
    /// empty, else the low 32 bits of its key's hash above its slot number plus one.
    private var buckets: [UInt64] = []
    private var live = 0
    /// Each group's most and least recently used slot (-1 when it has none), and its size.
    private var newest: [Int32] = []
    private var oldest: [Int32] = []
    private var sizes: [Int] = []

    /// Creates an empty table. `expectedCount` reserves room for that many entries up front
    /// (address space only: pages are touched as entries arrive), so growth does not double it.
    public init(expectedCount: Int = 0) {
        if expectedCount > 0 {
            keys.reserveCapacity(expectedCount)
            values.reserveCapacity(expectedCount)
            links.reserveCapacity(expectedCount)
        }
    }

    /// The number of entries.
    public var count: Int { live }

    /// The value for `key`, without changing the use order.
    public func peek(_ key: Key) -> Value? {
        guard let slot = find(key) else { return nil }
        return values[slot]
    }

    /// Changes the value for `key` in place and marks it most recently used; returns `nil` when absent.
    @discardableResult
    public mutating func update<R>(_ key: Key, touch: Bool = true, _ body: (inout Value) -> R) -> R? {
        guard let slot = find(key) else { return nil }
        if touch { moveToNewest(slot) }
        return body(&values[slot]!)
    }

    /// Inserts or replaces the value for `key`, marks it most recently used, and returns the least
    /// recently used entry of the same group that was evicted to stay within `capacity`, if any.
    /// A new key joins `group` (0 or more); a replaced one keeps its own.
    @discardableResult
    public mutating func set(_ key: Key, _ value: Value, capacity: Int, group: Int = 0) -> (key: Key, value: Value)? {
        let hash = key.tableHash
        if let slot = find(key, hash: hash) {
            values[slot] = value
            moveToNewest(slot)
            return nil
        }
        var evicted: (key: Key, value: Value)?
        if live >= capacity, let victimKey = oldestKey(inGroup: group) {
            let victim = remove(victimKey)!
            evicted = (victimKey, victim)
        }
        while newest.count <= group {
            newest.append(-1)
            oldest.append(-1)
            sizes.append(0)
        }
        // Grow the index before the new slot is filled, so the rehash does not place it too.
        if (live + 1) * 4 > buckets.count * 3 { growIndex() }
        let slot: Int
        if let reused = free.popLast() {
            slot = Int(reused)
        } else {
            slot = keys.count
            keys.append(nil)
            values.append(nil)
            links.append(Links(newer: -1, older: -1, group: 0))
        }
        keys[slot] = key
        values[slot] = value
        links[slot] = Links(newer: -1, older: newest[group], group: Int32(group))
        if newest[group] >= 0 { links[Int(newest[group])].newer = Int32(slot) }
        newest[group] = Int32(slot)
        if oldest[group] < 0 { oldest[group] = Int32(slot) }
        insertIntoIndex(slot: slot, hash: UInt32(truncatingIfNeeded: hash))
        live += 1
        sizes[group] += 1
        return evicted
    }

    /// Removes `key` and returns its value.
    @discardableResult
    public mutating func remove(_ key: Key) -> Value? {
        guard let bucket = bucket(of: key, hash: key.tableHash) else { return nil }
        let slot = Self.slot(inBucket: buckets[bucket])
        removeFromIndex(bucket: bucket)
        let slotLinks = links[slot]
        unlink(slotLinks)
        let value = values[slot]
        sizes[Int(slotLinks.group)] -= 1
        keys[slot] = nil
        values[slot] = nil
        free.append(Int32(slot))
        live -= 1
        return value
    }

    /// The least recently used key of group 0, if any.
    public var oldestKey: Key? { oldestKey(inGroup: 0) }

    /// The least recently used key of `group`, if it has any.
    public func oldestKey(inGroup group: Int) -> Key? {
        guard group >= 0, group < oldest.count, oldest[group] >= 0 else { return nil }
        return keys[Int(oldest[group])]
    }

    /// The number of entries of `group`.
    public func count(inGroup group: Int) -> Int { group >= 0 && group < sizes.count ? sizes[group] : 0 }

    /// The group with the most entries (of those tied, `preferring` when it is one, else the
    /// lowest); `nil` when the table is empty.
    public func largestGroup(preferring preferred: Int? = nil) -> Int? {
        guard let most = sizes.max(), most > 0 else { return nil }
        if let preferred, count(inGroup: preferred) == most { return preferred }
        return sizes.firstIndex(of: most)
    }

    /// The slot holding `key`, if any: a position that stays the key's until it is removed.
    public func slot(of key: Key) -> Int? { find(key) }

    /// The slot holding `key`, whose `tableHash` the caller already has. Inlined, with the
    /// search: a call would take a copy of the table's fields from a caller that may change them.
    @inline(__always)
    public func slot(of key: Key, hashValue: Int) -> Int? { find(key, hash: hashValue) }

    /// One past the highest slot number: every slot below it is in use or free.
    public var slotCount: Int { keys.count }

    /// The key and value in `slot`, if the slot is in use.
    public func entry(inSlot slot: Int) -> (key: Key, value: Value)? {
        guard slot >= 0, slot < keys.count, let key = keys[slot], let value = values[slot] else { return nil }
        return (key, value)
    }

    /// Changes the value in `slot` in place (marking it most recently used when `touch`); `nil`
    /// when the slot is not in use.
    @discardableResult
    public mutating func update<R>(slot: Int, touch: Bool = false, _ body: (inout Value) -> R) -> R? {
        guard slot >= 0, slot < values.count, values[slot] != nil else { return nil }
        if touch { moveToNewest(slot) }
        return body(&values[slot]!)
    }

    /// The slots in use, group by group, most recently used first in each.
    public var slotsNewestFirst: [Int] {
        var result: [Int] = []
        result.reserveCapacity(live)
        forEachSlotNewestFirst { result.append($0) }
        return result
    }

    /// Calls `body` with every key, group by group, most recently used first in each.
    public func forEachKey(_ body: (Key, Value) -> Void) {
        forEachSlotNewestFirst { slot in body(keys[slot]!, values[slot]!) }
    }

    /// Calls `body` with every value of `group`, most recently used first, without copying them
    /// out of the table.
    public func forEachValue(inGroup group: Int, _ body: (borrowing Value) -> Void) {
        guard group >= 0, group < newest.count else { return }
        values.withUnsafeBufferPointer { values in
            var slot = newest[group]
            while slot >= 0 {
                if let value = values[Int(slot)] { body(value) }
                slot = links[Int(slot)].older
            }
        }
    }

    private func forEachSlotNewestFirst(_ body: (Int) -> Void) {
        for head in newest {
            var slot = head
            while slot >= 0 {
                body(Int(slot))
                slot = links[Int(slot)].older
            }
        }
    }

    // MARK: The index

    /// The bucket word of `slot`, whose key's hash has `hash` as its low 32 bits.
    private static func bucketWord(slot: Int, hash: UInt32) -> UInt64 { UInt64(hash) << 32 | UInt64(slot + 1) }

    /// The slot a non-empty bucket word names.
    private static func slot(inBucket word: UInt64) -> Int { Int(word & 0xffff_ffff) - 1 }

    private func find(_ key: Key) -> Int? { find(key, hash: key.tableHash) }

    @inline(__always)
    private func find(_ key: Key, hash: Int) -> Int? {
        bucket(of: key, hash: hash).map { Self.slot(inBucket: buckets[$0]) }
    }

    @inline(__always)
    private func bucket(of key: Key, hash: Int) -> Int? {
        guard !buckets.isEmpty else { return nil }
        let mask = buckets.count - 1
        let hash32 = UInt32(truncatingIfNeeded: hash)
        var bucket = Int(hash32) & mask
        while true {
            let word = buckets[bucket]
            if word == 0 { return nil }
            if UInt32(truncatingIfNeeded: word >> 32) == hash32 {
                let slot = Self.slot(inBucket: word)
                // Most likely the key: its value and links start loading while the key is compared.
                Self.startLoading(values, slot)
                Self.startLoading(links, slot)
                if Self.holds(keys, slot, key) { return bucket }
            }
            bucket = (bucket + 1) & mask
        }
    }

    private mutating func insertIntoIndex(slot: Int, hash: UInt32) {
        let mask = buckets.count - 1
        var bucket = Int(hash) & mask
        while buckets[bucket] != 0 { bucket = (bucket + 1) & mask }
        buckets[bucket] = Self.bucketWord(slot: slot, hash: hash)
    }

    /// Whether `keys[slot]`, a slot the index names (so in use), is `key`. Read through the
    /// buffer, the stored key is compared where it is kept when its `==` is read-only
    /// (`@_effects(readonly)`, as `EntryKey`'s is); read through the array's subscript, it would
    /// be copied out first, its strings retained and then released.
    private static func holds(_ keys: [Key?], _ slot: Int, _ key: Key) -> Bool {
        keys.withUnsafeBufferPointer { keys in keys[slot]! == key }
    }

    /// Starts loading the cache lines of `array[index]` (an index in bounds).
    private static func startLoading<Element>(_ array: [Element], _ index: Int) {
        array.withUnsafeBufferPointer {
            prefetchCacheLines($0.baseAddress! + index, length: MemoryLayout<Element>.size)
        }
    }

    /// Doubles the index, each entry placed again by the hash its bucket word keeps.
    private mutating func growIndex() {
        let old = buckets
        buckets = [UInt64](repeating: 0, count: max(16, old.count * 2))
        for word in old where word != 0 {
            insertIntoIndex(slot: Self.slot(inBucket: word), hash: UInt32(truncatingIfNeeded: word >> 32))
        }
    }

    /// Empties `bucket`, shifting later entries of its probe run back so lookups stay correct.
    private mutating func removeFromIndex(bucket: Int) {
        let mask = buckets.count - 1
        var hole = bucket
        var next = bucket
        buckets[hole] = 0
        while true {
            next = (next + 1) & mask
            let word = buckets[next]
            if word == 0 { return }
            let home = Int(UInt32(truncatingIfNeeded: word >> 32)) & mask
            // The entry at `next` may move into the hole unless its home lies in (hole, next].
            let staysPut = hole <= next ? (hole < home && home <= next) : (hole < home || home <= next)
            if staysPut { continue }
            buckets[hole] = word
            buckets[next] = 0
            hole = next
        }
    }

    // MARK: Use order

    /// Takes the slot whose bookkeeping is `slotLinks` out of its group's list.
    private mutating func unlink(_ slotLinks: Links) {
        let group = Int(slotLinks.group)
        if slotLinks.newer >= 0 {
            links[Int(slotLinks.newer)].older = slotLinks.older
        } else {
            newest[group] = slotLinks.older
        }
        if slotLinks.older >= 0 {
            links[Int(slotLinks.older)].newer = slotLinks.newer
        } else {
            oldest[group] = slotLinks.newer
        }
    }

    /// Makes `slot`, a slot in use, its group's most recently used. Every cache hit's move, so
    /// done through the links' buffer: one uniqueness check of the links, none per link changed.
    private mutating func moveToNewest(_ slot: Int) {
        let group = Int(links[slot].group)
        let head = newest[group]
        guard Int32(slot) != head else { return }
        // Not its group's newest: the group's newest is another slot (`head`), and the slot has
        // a newer neighbour (perhaps `head`).
        let moved = links.withUnsafeMutableBufferPointer { links -> Links in
            let moved = links[slot]
            links[Int(moved.newer)].older = moved.older
            if moved.older >= 0 { links[Int(moved.older)].newer = moved.newer }
            links[slot].older = head
            links[slot].newer = -1
            links[Int(head)].newer = Int32(slot)
            return moved
        }
        newest[group] = Int32(slot)
        // It was its group's oldest: its newer neighbour is now.
        if moved.older < 0 { oldest[group] = moved.newer }
    }
}

extension LRUTable: Sendable where Key: Sendable, Value: Sendable {}
extension LRUTable.Links: Sendable {}
