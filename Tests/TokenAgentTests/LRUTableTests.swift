import TestSupport
import Testing
import TokenAgent

@Suite("LRU table")
struct LRUTableTests {
    @Test func evictsTheLeastRecentlyUsed() {
        var table = LRUTable<String, Int>()
        table.set("a", 1, capacity: 3)
        table.set("b", 2, capacity: 3)
        table.set("c", 3, capacity: 3)
        table.update("a") { $0 += 10 }
        let evicted = table.set("d", 4, capacity: 3)
        #expect(evicted?.key == "b")
        #expect(table.evictionOrder() == ["c", "a", "d"])
        #expect(table.peek("a") == 11)
        #expect(table.count == 3)
    }

    @Test func peekDoesNotTouch() {
        var table = LRUTable<String, Int>()
        table.set("a", 1, capacity: 2)
        table.set("b", 2, capacity: 2)
        _ = table.peek("a")
        table.set("c", 3, capacity: 2)
        #expect(table.peek("a") == nil)
    }

    @Test func removeAndReuseSlots() {
        var table = LRUTable<Int, Int>()
        for i in 0..<100 { table.set(i, i, capacity: 1000) }
        for i in stride(from: 0, to: 100, by: 2) { #expect(table.remove(i) == i) }
        #expect(table.count == 50)
        for i in 100..<150 { table.set(i, i, capacity: 1000) }
        #expect(table.count == 100)
        #expect(table.evictionOrder() == Array(stride(from: 1, to: 100, by: 2)) + Array(100..<150))
        var seen = 0
        table.forEachKey { key, value in
            #expect(key == value)
            seen += 1
        }
        #expect(seen == 100)
    }

    @Test func replacingAValueMarksItNewest() {
        var table = LRUTable<String, Int>()
        table.set("a", 1, capacity: 2)
        table.set("b", 2, capacity: 2)
        table.set("a", 5, capacity: 2)
        #expect(table.evictionOrder() == ["b", "a"])
        #expect(table.remove("zzz") == nil)
    }
}

@Suite("LRU table against a model")
struct LRUTableModelTests {
    /// Random sets, updates and removes against a dictionary and an array of use order: the
    /// table's own index (linear probing with backward-shift deletion) must agree at every step.
    @Test func randomOperationsMatchAModel() {
        check(LRUTable<Int, Int>(), key: { $0 })
    }

    /// The same with keys whose table hashes collide in their low 32 bits (three values for 600
    /// keys): buckets whose hash matches hold another key, probe runs are long, and deletions
    /// shift long runs back.
    @Test func randomOperationsMatchAModelWhenHashesCollide() {
        check(LRUTable<CollidingKey, Int>(), key: { CollidingKey(value: $0) })
    }

    private func check<Key: LRUTableKey>(_ empty: LRUTable<Key, Int>, key makeKey: (Int) -> Key) {
        var generator = SeededGenerator(seed: 20_261_123)
        var table = empty
        var model: [Key: Int] = [:]
        var order: [Key] = []  // oldest first
        let capacity = 300
        for step in 0..<20_000 {
            let key = makeKey(Int.random(in: 0..<600, using: &generator))
            switch Int.random(in: 0..<10, using: &generator) {
            case 0..<5:
                let evicted = table.set(key, step, capacity: capacity)
                if model[key] == nil, model.count >= capacity {
                    let victim = order.removeFirst()
                    #expect(evicted?.key == victim)
                    model[victim] = nil
                } else {
                    #expect(evicted == nil)
                }
                model[key] = step
                order.removeAll { $0 == key }
                order.append(key)
            case 5..<8:
                let found = table.update(key) { $0 }
                #expect(found == model[key])
                if found != nil {
                    order.removeAll { $0 == key }
                    order.append(key)
                }
            default:
                #expect(table.remove(key) == model.removeValue(forKey: key))
                order.removeAll { $0 == key }
            }
            #expect(table.count == model.count)
        }
        #expect(table.evictionOrder() == order)
        for (key, value) in model { #expect(table.peek(key) == value) }
    }
}

extension LRUTable {
    /// The keys of `group` in the order they would be evicted, least recently used first: what
    /// ``oldestKey(inGroup:)`` names, taken one after the other from a copy (the table is a value).
    func evictionOrder(inGroup group: Int = 0) -> [Key] {
        var copy = self
        var keys: [Key] = []
        while let key = copy.oldestKey(inGroup: group) {
            keys.append(key)
            _ = copy.remove(key)
        }
        return keys
    }
}

/// A key whose table hash has only three distinct low 32 bits (and five high ones).
struct CollidingKey: LRUTableKey {
    var value: Int
    var tableHash: Int { (value % 5) << 32 | value % 3 }
}
